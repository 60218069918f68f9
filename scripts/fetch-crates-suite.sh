#!/usr/bin/env bash
# Fetch the crates of the crates task suite (tests/fixtures/suites/crates/*/project.toml, section
# [upstream]): the published `.crate` from crates.io (offline: cargo's registry cache), verify the
# pinned sha256 (the checksum in crates.io's index and in a Cargo.lock), unpack
# (scripts/fetch-upstream.sh). Destination: ${EXECCRITIC_CACHE:-~/.cache/execcritic}/crates.
exec bash "$(dirname "${BASH_SOURCE[0]}")/fetch-upstream.sh" crates
