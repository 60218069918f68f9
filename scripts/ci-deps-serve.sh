#!/usr/bin/env bash
# `execcritic serve` CI dependencies (idempotent): real OpenAI-API clients that nobody here wrote —
# the official `openai` Python package and `mini-swe-agent` (which talks through litellm).
# Without them the serve client tests skip with a message; this script never fails CI.
set -uo pipefail
have() { python3 -c "import $1" >/dev/null 2>&1; }
pipi() { python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"; }
if ! have openai; then
  echo "ci-deps-serve: installing openai"
  pipi openai || echo "ci-deps-serve: openai not installed; the openai client tests will skip"
fi
if ! have minisweagent; then
  echo "ci-deps-serve: installing mini-swe-agent"
  pipi mini-swe-agent || echo "ci-deps-serve: mini-swe-agent not installed; its test will skip"
fi
exit 0
