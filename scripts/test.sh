#!/usr/bin/env bash
# The test command of the README: installs what the tests need, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --locked
# The emulated CUDA kernels under AddressSanitizer and ThreadSanitizer (docs/cuda.md).
bash scripts/emu-sanitize.sh
# The CUDA backend must keep compiling on machines without a toolkit or GPU: the library and
# binary with the real device, and the CUDA tests as they run on a GPU host (above they ran on the
# emulated device; the kernels' NVRTC compile test runs without the feature).
cargo build --locked --features cuda
cargo test --locked --features cuda --no-run --test cuda_ops --test cuda_model --test cuda_nvrtc --test engine_bench --test train_bench --test cuda_backward --test cuda_paged
# The GPU check's run (scripts/gpu-check.sh) rehearsed on the emulated device with the debug
# builds of the line above: its deadline, per-step caps, an injected hang, at most 8 files in
# $OUT, a record per step (docs/cuda.md, "Running the GPU check"; ~1.5 min).
bash scripts/gpu-check.sh --rehearse
