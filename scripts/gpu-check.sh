#!/usr/bin/env bash
# The GPU check of the CUDA backend in one call of the GPU host (docs/cuda.md, "Running the GPU
# check"). The logic is scripts/gpu_check.py (Python's standard library only: the host has
# Python but no Rust); `--help` describes it.
#
#   bash scripts/gpu-check.sh --build      # here: release binaries + kernels -> gpu-bin/gpu-bin.tar.xz
#   bash scripts/gpu-check.sh              # on the GPU host (carry gpu-bin): the run, under a deadline
#   bash scripts/gpu-check.sh --rehearse   # here: the same run on the emulated device, checked
#   bash scripts/gpu-check.sh --list       # the steps, their caps and what each needs
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null 2>&1 || { echo "gpu-check: python3 is required" >&2; exit 1; }
exec python3 scripts/gpu_check.py "$@"
