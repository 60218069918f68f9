#!/usr/bin/env bash
# Fetch the pinned upstream releases of a task suite built from published sources
# (tests/fixtures/suites/<suite>/*/project.toml, section [upstream]): download each archive,
# verify its pinned sha256, unpack it. Idempotent: a verified archive and its unpacked tree are
# kept. `fetch-pypi-suite.sh` and `fetch-crates-suite.sh` call it.
#   fetch-upstream.sh pypi|crates
# Destination: ${EXECCRITIC_CACHE:-~/.cache/execcritic}/<suite>/<name>-<version>.<ext> and
# <name>-<version>/.
set -euo pipefail
suite="$1"
# One row per registry: the archive's extension and how to download NAME VERSION into DIR.
case "$suite" in
  pypi)
    ext=tar.gz
    download() { python3 -m pip download --quiet --no-binary :all: --no-deps --dest "$3" "$1==$2"; }
    ;;
  crates)
    ext=crate
    # crates.io's static download host; offline, cargo's own registry cache when it has the crate.
    download() {
      local stem="$1-$2" cached
      curl -fsSL --retry 3 -o "$3/$stem.crate" "https://static.crates.io/crates/$1/$stem.crate" && return 0
      cached=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$stem.crate" 2>/dev/null | head -n1 || true)
      [ -n "$cached" ] || { echo "fetch-crates-suite: cannot download $stem.crate and cargo's cache has none" >&2; return 1; }
      cp "$cached" "$3/$stem.crate"
    }
    ;;
  *) echo "fetch-upstream: unknown suite '$suite' (pypi, crates)" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${EXECCRITIC_CACHE:-$HOME/.cache/execcritic}/$suite"
mkdir -p "$dest"
python3 - "$here/tests/fixtures/suites/$suite" <<'PY' | while read -r name version sha256; do
import pathlib, sys, tomllib
for project in sorted(pathlib.Path(sys.argv[1]).glob("*/project.toml")):
    up = tomllib.loads(project.read_text()).get("upstream")
    if up:
        print(up["name"], up["version"], up["sha256"])
PY
  stem="$name-$version"
  archive="$dest/$stem.$ext"
  if [ ! -f "$archive" ] || [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$sha256" ]; then
    tmp="$(mktemp -d)"
    download "$name" "$version" "$tmp"
    got="$(sha256sum "$tmp/$stem.$ext" | cut -d' ' -f1)"
    if [ "$got" != "$sha256" ]; then
      echo "fetch-$suite-suite: $stem.$ext has sha256 $got, expected $sha256" >&2
      rm -rf "$tmp"
      exit 1
    fi
    mv "$tmp/$stem.$ext" "$archive"
    rm -rf "$tmp" "$dest/$stem"
  fi
  if [ ! -d "$dest/$stem" ]; then
    tmp="$(mktemp -d "$dest/.unpack-XXXXXX")"
    tar -xzf "$archive" -C "$tmp"
    mv "$tmp/$stem" "$dest/$stem"
    rm -rf "$tmp"
  fi
  echo "fetch-$suite-suite: $stem ready in $dest/$stem"
done
