#!/usr/bin/env bash
# Fetch the Go libraries of the golang task suite (tests/fixtures/suites/golang/*/project.toml,
# section [upstream]): Debian's golang-*-dev package by version (apt-get download; offline, apt's
# archive cache), verify the pinned sha256 (the SHA256 in Debian's Packages index), unpack its
# import path as the module root, and its [[upstream.deps]] (golang-*-dev packages too) into the
# module's vendor/ (scripts/fetch-upstream.sh).
# Destination: ${EXECCRITIC_CACHE:-~/.cache/execcritic}/golang.
exec bash "$(dirname "${BASH_SOURCE[0]}")/fetch-upstream.sh" golang
