#!/usr/bin/env bash
# One prepared GPU run of the CUDA backend, for an H200 host with CUDA 13 drivers, PyTorch and
# transformers, but no Rust toolchain and no network.
#
#   On a CPU machine with Rust:   bash scripts/gpu-check.sh --build
#       builds the release test binaries with `--features cuda` (cudarc's CUDA 13.0 bindings,
#       dynamic loading) and copies them to gpu-bin/ (carry that folder to the host).
#   On the GPU host:              bash scripts/gpu-check.sh [--dry-run]
#       finds libnvrtc/libcublas (EXECCRITIC_NVRTC, else NVIDIA wheels beside PyTorch), runs
#       the NVRTC compile check for the present GPU, then every op-parity test with the GPU
#       mandatory, and writes $OUT/gpu-check.json. --dry-run checks binaries, flags and paths
#       and writes the plan without touching the GPU.
#
# Not yet in this script (the pieces do not exist yet, see docs/cuda.md): whole-model parity
# of a CUDA forward against the CPU reference, and the full-size Qwen3.5-35B-A3B benchmark.
# They are reported as "not_built" in the JSON so a reader cannot mistake them for passes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=gpu-bin
OUT="${OUT:-$PWD/gpu-check-out}"
mode=run
for a in "$@"; do
  case "$a" in
    --build) mode=build ;;
    --dry-run) mode=dry ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "gpu-check: unknown flag $a" >&2; exit 2 ;;
  esac
done

if [ "$mode" = build ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  mkdir -p "$BIN"
  for t in cuda_nvrtc cuda_ops; do
    exe=$(cargo test --release --features cuda --test "$t" --no-run --message-format=json 2>/dev/null \
      | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -1)
    [ -n "$exe" ] || { echo "gpu-check: could not build test $t" >&2; exit 1; }
    cp "$exe" "$BIN/$t"
  done
  git rev-parse HEAD > "$BIN/COMMIT" 2>/dev/null || echo unknown > "$BIN/COMMIT"
  echo "gpu-check: built $(ls $BIN | tr '\n' ' ') at $(cat $BIN/COMMIT)"
  exit 0
fi

mkdir -p "$OUT"
fail() { echo "gpu-check: $*" >&2; exit 1; }
for t in cuda_nvrtc cuda_ops; do
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
export EXECCRITIC_NVRTC="${EXECCRITIC_NVRTC:-$(find_lib nvrtc)}"
export EXECCRITIC_CUBLAS="${EXECCRITIC_CUBLAS:-$(find_lib cublas)}"
export EXECCRITIC_CUBLASLT="${EXECCRITIC_CUBLASLT:-$(find_lib cublasLt)}"
[ -f "$EXECCRITIC_NVRTC" ] || fail "libnvrtc not found (set EXECCRITIC_NVRTC)"
for v in EXECCRITIC_CUBLAS EXECCRITIC_CUBLASLT; do [ -f "${!v}" ] || unset "$v"; done
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
commit=$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)

if [ "$mode" = dry ]; then
  "$BIN/cuda_ops" --list >/dev/null || fail "$BIN/cuda_ops does not run"
  python3 - "$OUT/gpu-check.json" <<PY
import json, sys
json.dump({"mode": "dry-run", "commit": "$commit", "gpu": "${gpu_name:-none visible}",
  "nvrtc": "$EXECCRITIC_NVRTC", "cublas": "${EXECCRITIC_CUBLAS:-loader path}",
  "tests": "$("$BIN/cuda_ops" --list 2>/dev/null | grep ': test' | sed 's/: test//' | tr '\n' ' ')".split(),
  "model_parity": "not_built", "full_size_benchmark": "not_built"}, open(sys.argv[1], "w"), indent=1)
PY
  echo "gpu-check: dry run ok; plan in $OUT/gpu-check.json"
  exit 0
fi

export EXECCRITIC_REQUIRE_GPU=1
rc_nvrtc=0; "$BIN/cuda_nvrtc" --test-threads=1 >"$OUT/cuda_nvrtc.log" 2>&1 || rc_nvrtc=$?
rc_ops=0; "$BIN/cuda_ops" --test-threads=1 >"$OUT/cuda_ops.log" 2>&1 || rc_ops=$?
python3 - "$OUT" "$rc_nvrtc" "$rc_ops" <<PY
import json, re, sys
out, rn, ro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def results(log):
    return {m.group(1): m.group(2) for m in re.finditer(r"^test (\S+) \.\.\. (\w+)", open(f"{out}/{log}").read(), re.M)}
json.dump({"mode": "run", "commit": "$commit", "gpu": "$gpu_name",
  "nvrtc": "$EXECCRITIC_NVRTC", "nvrtc_compile": {"rc": rn, "tests": results("cuda_nvrtc.log")},
  "op_parity": {"rc": ro, "tests": results("cuda_ops.log")},
  "model_parity": "not_built", "full_size_benchmark": "not_built"}, open(f"{out}/gpu-check.json", "w"), indent=1)
PY
echo "gpu-check: nvrtc rc=$rc_nvrtc, op parity rc=$rc_ops; results in $OUT/gpu-check.json"
[ "$rc_nvrtc" = 0 ] && [ "$rc_ops" = 0 ]
