#!/usr/bin/env bash
# Run cargo for this worktree with the shared target dir.
#
# Several worktrees of the same crate share /work/target; cargo's artifact names ignore the
# package path and dep-info paths are relative, so an artifact built from another worktree can
# look fresh here (and be linked into this worktree's tests). A package-level profile override
# (a codegen-units value nobody else uses) gives this worktree's build of the crate its own
# metadata hash, hence its own artifacts, without rebuilding any dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target}
exec cargo \
    --config 'profile.dev.package.execcritic.codegen-units=251' \
    --config 'profile.test.package.execcritic.codegen-units=251' \
    --config 'profile.release.package.execcritic.codegen-units=3' \
    "$@"
