#!/usr/bin/env bash
# One prepared GPU run of the CUDA backend, for an H200 host with CUDA 13 drivers, PyTorch and
# transformers, but no Rust toolchain and no network.
#
#   On a CPU machine with Rust:   bash scripts/gpu-check.sh --build
#       builds the release test binaries with `--features cuda` (cudarc's CUDA 13.0 bindings,
#       dynamic loading) and copies them to gpu-bin/ (carry that folder to the host).
#   On the GPU host:              bash scripts/gpu-check.sh [--dry-run]
#       finds libnvrtc/libcublas (EXECCRITIC_NVRTC, else NVIDIA wheels beside PyTorch), runs
#       the NVRTC compile check, every op-parity test and the whole-model parity tests on the
#       fixtures (models/) with the GPU mandatory, then the full-size Qwen3.5-35B-A3B benchmarks
#       on random weights generated on the GPU: the model-step loop (cuda-bench.json) and the
#       real engine (scheduler, paged cache, device sampling: batch-1, 64- and 256-way decode,
#       4k prefill, multi-turn agent traffic; engine-bench.json, and h200-engine.json with the
#       keys of issue #15, measured through the engine), then two full-size LoRA GRPO iterations
#       of the device trainer (h200-train.json: rollout and update tok/s, peak memory, the step
#       split, the loss and the weights moving; tests/train_bench.rs), then `execcritic demo train
#       --size ci --device cuda` (the whole demo on the GPU; $OUT/demo); writes $OUT/gpu-check.json (+ the
#       logs). --dry-run checks binaries, flags and paths and writes the plan without touching
#       the GPU. --no-bench skips the benchmarks.
#   Each test runs in its own process under a timeout (EXECCRITIC_TEST_TIMEOUT, default 300 s), so
#   one illegal address or hang cannot poison the rest; when the host has compute-sanitizer, the
#   op tests also run under its memcheck (one process per test) and the result is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=gpu-bin
OUT="${OUT:-$PWD/gpu-check-out}"
mode=run
bench=1
TESTS="cuda_nvrtc cuda_ops cuda_model"
BENCHES="engine_bench train_bench"
for a in "$@"; do
  case "$a" in
    --build) mode=build ;;
    --dry-run) mode=dry ;;
    --no-bench) bench=0 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "gpu-check: unknown flag $a" >&2; exit 2 ;;
  esac
done

if [ "$mode" = build ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  mkdir -p "$BIN"
  for t in $TESTS $BENCHES; do
    exe=$(cargo test --release --features cuda --test "$t" --no-run --message-format=json 2>/dev/null \
      | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -1)
    [ -n "$exe" ] || { echo "gpu-check: could not build test $t" >&2; exit 1; }
    cp "$exe" "$BIN/$t"
  done
  # the CLI, for `demo train --device cuda` (the whole demo run on the GPU)
  cargo build --release --features cuda --bin execcritic
  cp "$CARGO_TARGET_DIR/release/execcritic" "$BIN/execcritic"
  git rev-parse HEAD > "$BIN/COMMIT" 2>/dev/null || echo unknown > "$BIN/COMMIT"
  echo "gpu-check: built $(ls $BIN | tr '\n' ' ') at $(cat $BIN/COMMIT)"
  exit 0
fi

mkdir -p "$OUT"
fail() { echo "gpu-check: $*" >&2; exit 1; }
for t in $TESTS $BENCHES; do
  [ -x "$BIN/$t" ] || fail "missing $BIN/$t (run 'bash scripts/gpu-check.sh --build' on a machine with Rust first)"
done
# libnvrtc / libcublas: explicit env, else the NVIDIA wheels next to torch
find_lib() {  # $1 = stem (nvrtc, cublas, cublasLt)
  python3 - "$1" <<'PY' 2>/dev/null || true
import glob, site, sys
stem = sys.argv[1]
for root in site.getsitepackages() + [site.getusersitepackages()]:
    hits = sorted(glob.glob(f"{root}/nvidia/**/lib{stem}.so*", recursive=True))
    if hits:
        print(hits[-1]); break
PY
}
# Prefer the toolkit's NVRTC (its version matches the driver on CUDA images): PTX from a newer
# NVRTC than the driver knows fails to load (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
toolkit_nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | grep -v builtins | sort | tail -1 || true)
export EXECCRITIC_NVRTC="${EXECCRITIC_NVRTC:-${toolkit_nvrtc:-$(find_lib nvrtc)}}"
export EXECCRITIC_CUBLAS="${EXECCRITIC_CUBLAS:-$(find_lib cublas)}"
export EXECCRITIC_CUBLASLT="${EXECCRITIC_CUBLASLT:-$(find_lib cublasLt)}"
[ -f "$EXECCRITIC_NVRTC" ] || fail "libnvrtc not found (set EXECCRITIC_NVRTC)"
for v in EXECCRITIC_CUBLAS EXECCRITIC_CUBLASLT; do [ -f "${!v}" ] || unset "$v"; done
[ -d models/tiny-qwen35 ] || fail "fixtures models/tiny-qwen35* missing from the tree"
export EXECCRITIC_MODELS="$PWD/models"
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
commit=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)

if [ "$mode" = dry ]; then
  listing=""
  for t in $TESTS $BENCHES; do
    "$BIN/$t" --list >/dev/null || fail "$BIN/$t does not run"
    listing="$listing $("$BIN/$t" --list --include-ignored 2>/dev/null | grep ': test' | sed "s/: test//;s/^/$t::/" | tr '\n' ' ')"
  done
  python3 - "$OUT/gpu-check.json" <<PY
import json, sys
json.dump({"mode": "dry-run", "commit": "$commit", "gpu": "${gpu_name:-none visible}",
  "nvrtc": "$EXECCRITIC_NVRTC", "cublas": "${EXECCRITIC_CUBLAS:-loader path}",
  "models": "$EXECCRITIC_MODELS", "bench": $bench, "tests": "$listing".split()},
  open(sys.argv[1], "w"), indent=1)
PY
  echo "gpu-check: dry run ok; plan in $OUT/gpu-check.json"
  exit 0
fi

export EXECCRITIC_REQUIRE_GPU=1
TIMEOUT="${EXECCRITIC_TEST_TIMEOUT:-300}"
# one process per test: "<binary>::<test> <status>" lines in $OUT/results.txt
: >"$OUT/results.txt"
declare -A rc
run_each() {  # $1 = binary, $2 = log prefix, rest = wrapper command (may be empty)
  local t=$1 prefix=$2; shift 2
  local names; names=$("$BIN/$t" --list 2>/dev/null | sed -n 's/: test$//p')
  local worst=0
  for n in $names; do
    local code=0
    timeout "$TIMEOUT" "$@" "$BIN/$t" --exact "$n" --test-threads=1 --nocapture \
      >"$OUT/$prefix.$n.log" 2>&1 || code=$?
    local status=ok
    [ "$code" = 0 ] || status=failed
    [ "$code" = 124 ] && status=timeout
    echo "$prefix::$n $status" >>"$OUT/results.txt"
    [ "$code" = 0 ] || worst=1
  done
  return $worst
}
for t in $TESTS; do
  rc[$t]=0
  run_each "$t" "$t" || rc[$t]=1
done
rc_sanitizer=skipped
if command -v compute-sanitizer >/dev/null 2>&1; then
  rc_sanitizer=0
  run_each cuda_ops sanitizer.cuda_ops compute-sanitizer --tool memcheck --error-exitcode 86 \
    || rc_sanitizer=1
fi
# run_bench VAR TIMEOUT BINARY TEST LOG: one ignored full-size benchmark test (its JSON lands in
# $OUT), its exit code in VAR ("skipped" with --no-bench)
run_bench() {
  local var=$1 limit=$2 bin=$3 test=$4 log=$5 code=0
  if [ "$bench" != 1 ]; then printf -v "$var" skipped; return; fi
  OUT="$OUT" EXECCRITIC_COMMIT="$commit" EXECCRITIC_DATE="$(date -u +%F)" timeout "$limit" \
    "$BIN/$bin" --ignored --exact "$test" --nocapture --test-threads=1 >"$OUT/$log" 2>&1 || code=$?
  printf -v "$var" '%s' "$code"
}
# the model-step loop (cuda-bench.json)
run_bench rc_bench 1200 cuda_model full_size_benchmark bench.log
# the same workloads through the real engine (engine-bench.json, h200-engine.json)
run_bench rc_engine 1800 engine_bench full_size_engine_benchmark engine-bench.log
# two LoRA GRPO iterations of the device trainer: rollouts + updates on one copy of the weights
# (h200-train.json)
run_bench rc_train 1800 train_bench full_size_lora_grpo_step_benchmark train-bench.log
# the CI-sized demo run on the GPU: teacher → SFT → GRPO, SFT/rollouts/evaluations/updates on
# the device (needs bubblewrap, git and pytest on the host, as on a CPU machine); its report and
# metrics land in $OUT/demo
rc_demo=skipped
if [ "$bench" = 1 ] && [ -x "$BIN/execcritic" ]; then
  rc_demo=0
  timeout 1800 "$BIN/execcritic" demo train --size ci --device cuda --models models --out "$OUT/demo" \
    >"$OUT/demo-train.log" 2>&1 || rc_demo=$?
  rm -rf "$OUT/demo/init" "$OUT/demo/sft" "$OUT/demo/grpo"  # checkpoints: not worth bringing back
fi
python3 - "$OUT" "${rc[cuda_nvrtc]}" "${rc[cuda_ops]}" "${rc[cuda_model]}" "$rc_bench" "$rc_sanitizer" "$rc_engine" "$rc_train" "$rc_demo" <<PY
import json, os, sys
out = sys.argv[1]
lines = [l.split() for l in open(f"{out}/results.txt") if l.strip()]
def results(prefix):
    return {k.split("::", 1)[1]: v for k, v in lines if k.split("::", 1)[0] == prefix}
def load(name):
    return json.load(open(f"{out}/{name}")) if os.path.exists(f"{out}/{name}") else None
bench = load("cuda-bench.json")
json.dump({"mode": "run", "commit": "$commit", "gpu": "$gpu_name", "nvrtc": "$EXECCRITIC_NVRTC",
  "nvrtc_compile": {"rc": int(sys.argv[2]), "tests": results("cuda_nvrtc")},
  "op_parity": {"rc": int(sys.argv[3]), "tests": results("cuda_ops")},
  "model_parity": {"rc": int(sys.argv[4]), "tests": results("cuda_model")},
  "compute_sanitizer": {"rc": sys.argv[6], "tests": results("sanitizer.cuda_ops")},
  "full_size_benchmark": {"rc": sys.argv[5], "result": bench},
  "engine_benchmark": {"rc": sys.argv[7], "h200": load("h200-engine.json"), "result": load("engine-bench.json")},
  "train_benchmark": {"rc": sys.argv[8], "h200": load("h200-train.json")},
  "demo_train": {"rc": sys.argv[9], "summary": load("demo/summary.json")}},
  open(f"{out}/gpu-check.json", "w"), indent=1)
PY
echo "gpu-check: nvrtc rc=${rc[cuda_nvrtc]} ops rc=${rc[cuda_ops]} model rc=${rc[cuda_model]} sanitizer rc=$rc_sanitizer bench rc=$rc_bench engine rc=$rc_engine train rc=$rc_train demo rc=$rc_demo; $OUT/gpu-check.json"
[ "${rc[cuda_nvrtc]}" = 0 ] && [ "${rc[cuda_ops]}" = 0 ] && [ "${rc[cuda_model]}" = 0 ] \
  && { [ "$rc_sanitizer" = 0 ] || [ "$rc_sanitizer" = skipped ]; } \
  && { [ "$rc_bench" = 0 ] || [ "$rc_bench" = skipped ]; } \
  && { [ "$rc_engine" = 0 ] || [ "$rc_engine" = skipped ]; } \
  && { [ "$rc_train" = 0 ] || [ "$rc_train" = skipped ]; }
