#!/usr/bin/env bash
# Side-by-side CPU benchmark (see scripts/bench_cpu_vs_transformers.py). Needs the reference venv
# from scripts/make_fixtures.py (torch 2.15.0, transformers 5.23.0) at $VENV (default /work/.venv-ref).
set -euo pipefail
VENV=${VENV:-/work/.venv-ref}
cd "$(dirname "$0")/.."
exec "$VENV/bin/python" scripts/bench_cpu_vs_transformers.py "$@"
