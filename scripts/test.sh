#!/usr/bin/env bash
# The test command of the README: installs what the tests need, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# `cargo test`, with its test binaries run two at a time (scripts/run_tests.py: most of them wait
# on sandboxes and runners rather than compute; one at a time the suite took over an hour on CI's
# two cores), then the doctests.
target_dir="$(cargo metadata --locked --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
mkdir -p "$target_dir"
cargo test --locked --no-run --message-format=json-render-diagnostics > "$target_dir/test-binaries.json"
python3 scripts/run_tests.py "$target_dir/test-binaries.json"
cargo test --locked --doc
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
