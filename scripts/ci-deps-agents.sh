#!/usr/bin/env bash
# System packages the agents' tests need (idempotent): bubblewrap for the local sandbox, git,
# Python 3 with pytest for the bundled task suite, and `python` on PATH (the suite's test
# commands and the scripted policies call `python`).
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v git >/dev/null || need+=(git)
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import pytest' 2>/dev/null || need+=(python3-pytest)
command -v python >/dev/null || need+=(python-is-python3)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
