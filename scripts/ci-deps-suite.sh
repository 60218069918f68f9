#!/usr/bin/env bash
# System and Python packages the task-suite tests need (tests/suite_tasks.rs runs the suites'
# test runners directly on the host): git, python3 with pytest. Then fetch the PyPI suite's
# pinned sdist and the crates suite's pinned crates. Idempotent.
set -euo pipefail
if ! command -v git >/dev/null || ! command -v python3 >/dev/null; then
  apt-get update -qq && apt-get install -y -qq git python3 python3-pip
fi
if ! python3 -m pytest --version >/dev/null 2>&1; then
  apt-get install -y -qq python3-pytest || python3 -m pip install --quiet pytest \
    || python3 -m pip install --quiet --break-system-packages pytest
fi
"$(dirname "${BASH_SOURCE[0]}")/fetch-pypi-suite.sh"
"$(dirname "${BASH_SOURCE[0]}")/fetch-crates-suite.sh"
