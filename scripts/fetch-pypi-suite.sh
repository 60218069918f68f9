#!/usr/bin/env bash
# Fetch the sdists of the PyPI task suite (tests/fixtures/suites/pypi/*/project.toml, section
# [upstream]): pip download, verify the pinned sha256, unpack. Idempotent: a verified archive
# and its unpacked tree are kept. Destination: ${EXECCRITIC_CACHE:-~/.cache/execcritic}/pypi.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${EXECCRITIC_CACHE:-$HOME/.cache/execcritic}/pypi"
mkdir -p "$dest"
python3 - "$here/tests/fixtures/suites/pypi" <<'PY' | while read -r name version sha256; do
import pathlib, sys, tomllib
for project in sorted(pathlib.Path(sys.argv[1]).glob("*/project.toml")):
    up = tomllib.loads(project.read_text()).get("upstream")
    if up:
        print(up["name"], up["version"], up["sha256"])
PY
  stem="$name-$version"
  archive="$dest/$stem.tar.gz"
  if [ ! -f "$archive" ] || [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$sha256" ]; then
    tmp="$(mktemp -d)"
    python3 -m pip download --quiet --no-binary :all: --no-deps \
      --dest "$tmp" "$name==$version"
    got="$(sha256sum "$tmp/$stem.tar.gz" | cut -d' ' -f1)"
    if [ "$got" != "$sha256" ]; then
      echo "fetch-pypi-suite: $stem.tar.gz has sha256 $got, expected $sha256" >&2
      rm -rf "$tmp"
      exit 1
    fi
    mv "$tmp/$stem.tar.gz" "$archive"
    rm -rf "$tmp" "$dest/$stem"
  fi
  if [ ! -d "$dest/$stem" ]; then
    tmp="$(mktemp -d "$dest/.unpack-XXXXXX")"
    tar -xzf "$archive" -C "$tmp"
    mv "$tmp/$stem" "$dest/$stem"
    rm -rf "$tmp"
  fi
  echo "fetch-pypi-suite: $stem ready in $dest/$stem"
done
