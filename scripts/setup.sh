#!/usr/bin/env bash
# Installs what execcritic's commands and tests need on a Debian machine (idempotent):
# bubblewrap (local sandbox), git, patch, Python 3 with pytest (the bundled task suites' runner),
# then every area's extra set-up in scripts/ci-deps-*.sh (docker daemon + local image, the
# PyPI-derived task suite, …).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v patch >/dev/null 2>&1 || need_apt+=(patch)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! python3 -c 'import pytest' >/dev/null 2>&1; then
  echo "setup: installing pytest"
  python3 -m pip install -q pytest 2>/dev/null \
    || python3 -m pip install -q --break-system-packages pytest
fi
for f in scripts/ci-deps-*.sh; do
  [ -e "$f" ] || continue
  echo "setup: $f"
  bash "$f"
done
