#!/usr/bin/env bash
# Reference package for the official-grading differential (tests/official_parsers.rs,
# scripts/swebench-oracle.py): swebench 5.0.2 without its dependencies (docker, modal, datasets
# are not needed to grade a log) plus unidiff, which its grading module imports. Idempotent and
# quiet; any failure only makes the live differential skip with a message, never fails CI.
set -uo pipefail
have() {
  python3 - <<'PY' >/dev/null 2>&1
import importlib.metadata as m, unidiff  # noqa: F401
assert m.version("swebench") == "5.0.2"
PY
}
have && exit 0
echo "ci-deps-swebench: installing swebench==5.0.2 (--no-deps) and unidiff"
install() { python3 -m pip install -q --disable-pip-version-check "$@" >/dev/null 2>&1 \
  || python3 -m pip install -q --disable-pip-version-check --break-system-packages "$@" >/dev/null 2>&1; }
install --no-deps "swebench==5.0.2" && install unidiff \
  || echo "ci-deps-swebench: pip install failed; the live swebench differential will skip"
have || echo "ci-deps-swebench: swebench 5.0.2 still not importable; the live differential will skip"
exit 0
