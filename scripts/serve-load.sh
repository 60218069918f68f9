#!/usr/bin/env bash
# Load test of `execcritic serve` on the tiny fixture model: 64 concurrent streaming clients for a
# bounded time on loopback (scripts/serve_load.py), result in benches/results/serve-load.json.
# usage: scripts/serve-load.sh [CLIENTS] [DURATION_S]   (EXECCRITIC_BIN picks the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="${1:-64}"; DURATION="${2:-20}"
BIN="${EXECCRITIC_BIN:-}"
if [ -z "$BIN" ]; then
  cargo build --release --bin execcritic
  BIN="${CARGO_TARGET_DIR:-target}/release/execcritic"
fi
MODEL="$(mktemp -d)"; LOG="$(mktemp)"
cp models/tiny-qwen35/{config.json,model.safetensors} "$MODEL"/
cp models/tokenizer/{tokenizer.json,tokenizer_config.json,chat_template.jinja} "$MODEL"/
"$BIN" serve --model "$MODEL" --port 0 --served-model-name tiny >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$MODEL" "$LOG"' EXIT
for _ in $(seq 1 100); do grep -q '^serving' "$LOG" && break; sleep 0.1; done
BASE="$(grep -o 'http://[^ ]*' "$LOG" | head -1)"; BASE="${BASE%/v1}"
python3 scripts/serve_load.py "$BASE" tiny "$PID" benches/results/serve-load.json \
  --clients "$CLIENTS" --duration "$DURATION" --note "binary: $BIN"
