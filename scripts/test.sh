#!/usr/bin/env bash
# The test command of the README: installs what the tests need, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --locked
