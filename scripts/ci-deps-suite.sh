#!/usr/bin/env bash
# System and Python packages the task-suite tests need (tests/suite_tasks.rs runs the suites'
# test runners directly on the host): git, python3 with pytest. Then fetch the PyPI suite's
# pinned sdist, the crates suite's pinned crates and the golang suite's pinned Debian packages.
# Idempotent.
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
# Debian's archive may be out of reach: the golang suite's test then skips, saying so.
"$(dirname "${BASH_SOURCE[0]}")/fetch-golang-suite.sh" || echo "ci-deps-suite: the golang suite was not fetched; its test will skip"
