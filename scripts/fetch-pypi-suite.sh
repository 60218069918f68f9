#!/usr/bin/env bash
# Fetch the sdists of the PyPI task suite (tests/fixtures/suites/pypi/*/project.toml, section
# [upstream]): pip download, verify the pinned sha256, unpack (scripts/fetch-upstream.sh).
# Destination: ${EXECCRITIC_CACHE:-~/.cache/execcritic}/pypi.
exec bash "$(dirname "${BASH_SOURCE[0]}")/fetch-upstream.sh" pypi
