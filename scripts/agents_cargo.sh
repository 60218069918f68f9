#!/usr/bin/env bash
# Run cargo for this worktree with the shared target dir. Several worktrees of the same crate
# share /work/target and produce identical artifact names (cargo's metadata hash ignores the
# package path, dep-info paths are relative), so an artifact built from another worktree can
# look fresh here. Touching the crate roots makes this worktree's sources newer than any such
# artifact, forcing cargo to rebuild the crate from these sources.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target}
touch src/lib.rs src/main.rs
exec cargo "$@"
