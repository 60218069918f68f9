#!/usr/bin/env bash
# Soak one fuzz target of tests/fuzz/ (docs/testing.md, "Fuzz targets"): runs it for SECONDS
# with fresh seeds (batches of 2,000 inputs, seeds derived from the target's name and FIRST_SEED)
# and prints the number of inputs executed. A failure prints the shrunk input and its batch seed;
# `FUZZ_SEED=<seed> FUZZ_CASES=2000 cargo test --test fuzz <target>` replays it.
#   scripts/fuzz-soak.sh TARGET SECONDS [FIRST_SEED]
#   scripts/fuzz-soak.sh list            # the targets
set -euo pipefail
cd "$(dirname "$0")/.."
targets() { cargo test --test fuzz -- --list 2>/dev/null | sed -n 's/^[a-z_]*::\([a-z_]*\): test$/\1 &/p' | grep -v ' regressions::'; }
if [[ "${1:-}" == list ]]; then
    targets | cut -d' ' -f1
    exit 0
fi
target=${1:?usage: scripts/fuzz-soak.sh TARGET SECONDS [FIRST_SEED]}
seconds=${2:?usage: scripts/fuzz-soak.sh TARGET SECONDS [FIRST_SEED]}
# The test's full name (`module::target`).
full=$(targets | awk -v t="$target" '$1 == t { sub(/:$/, "", $2); print $2 }')
[[ -n "$full" ]] || { echo "fuzz-soak: no target $target (scripts/fuzz-soak.sh list)" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
FUZZ_SECONDS=$seconds FUZZ_SEED=${3:-0} cargo test --test fuzz -- --exact "$full" --nocapture \
    >"$log" 2>&1 || status=$?
grep -oE "fuzz $target: .*" "$log" || true
if [[ $status -ne 0 ]]; then
    tail -n 60 "$log"
    echo "fuzz-soak: $target FAILED (exit $status)" >&2
fi
exit $status
