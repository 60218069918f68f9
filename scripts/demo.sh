#!/usr/bin/env bash
# The README's first command: installs what is needed, builds the release binary and runs the
# end-to-end demo (Test episode + Repair controller + official grading) on the bundled task suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo run --release --locked -- demo "$@"
