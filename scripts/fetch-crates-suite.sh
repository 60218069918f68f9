#!/usr/bin/env bash
# Fetch the crates of the crates task suite (tests/fixtures/suites/crates/*/project.toml, section
# [upstream]): the published `.crate` archive from crates.io's static download host (or, offline,
# cargo's own registry cache), verify the pinned sha256 (the checksum in crates.io's index and in
# a Cargo.lock), unpack. Idempotent: a verified archive and its unpacked tree are kept.
# Destination: ${EXECCRITIC_CACHE:-~/.cache/execcritic}/crates.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${EXECCRITIC_CACHE:-$HOME/.cache/execcritic}/crates"
mkdir -p "$dest"
python3 - "$here/tests/fixtures/suites/crates" <<'PY' | while read -r name version sha256; do
import pathlib, sys, tomllib
for project in sorted(pathlib.Path(sys.argv[1]).glob("*/project.toml")):
    up = tomllib.loads(project.read_text()).get("upstream")
    if up:
        print(up["name"], up["version"], up["sha256"])
PY
  stem="$name-$version"
  archive="$dest/$stem.crate"
  if [ ! -f "$archive" ] || [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$sha256" ]; then
    tmp="$(mktemp -d)"
    if ! curl -fsSL --retry 3 -o "$tmp/$stem.crate" "https://static.crates.io/crates/$name/$stem.crate"; then
      cached=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$stem.crate" 2>/dev/null | head -n1 || true)
      if [ -z "$cached" ]; then
        echo "fetch-crates-suite: cannot download $stem.crate and cargo's cache has none" >&2
        rm -rf "$tmp"
        exit 1
      fi
      cp "$cached" "$tmp/$stem.crate"
    fi
    got="$(sha256sum "$tmp/$stem.crate" | cut -d' ' -f1)"
    if [ "$got" != "$sha256" ]; then
      echo "fetch-crates-suite: $stem.crate has sha256 $got, expected $sha256" >&2
      rm -rf "$tmp"
      exit 1
    fi
    mv "$tmp/$stem.crate" "$archive"
    rm -rf "$tmp" "$dest/$stem"
  fi
  if [ ! -d "$dest/$stem" ]; then
    tmp="$(mktemp -d "$dest/.unpack-XXXXXX")"
    tar -xzf "$archive" -C "$tmp"
    mv "$tmp/$stem" "$dest/$stem"
    rm -rf "$tmp"
  fi
  echo "fetch-crates-suite: $stem ready in $dest/$stem"
done
