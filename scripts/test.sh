#!/usr/bin/env bash
# The test command of the README: installs what the tests need, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --locked
# The emulated CUDA kernels under AddressSanitizer and ThreadSanitizer (docs/cuda.md).
bash scripts/emu-sanitize.sh
# The CUDA backend must keep compiling on machines without a toolkit or GPU (its GPU tests skip
# without a driver; the kernels' NVRTC compile test above runs without the feature).
cargo build --locked --features cuda
