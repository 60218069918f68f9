#!/usr/bin/env bash
# Fetch the pinned upstream releases of a task suite built from published sources
# (tests/fixtures/suites/<suite>/*/project.toml, section [upstream]): download each archive,
# verify its pinned sha256, unpack it. Idempotent: a verified archive and its unpacked tree are
# kept. `fetch-pypi-suite.sh`, `fetch-crates-suite.sh` and `fetch-golang-suite.sh` call it.
#   fetch-upstream.sh pypi|crates|golang
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
  golang)
    # Debian's Go library packages (golang-*-dev: the upstream source, tests included, under
    # /usr/share/gocode/src/<import path>), pinned by the SHA256 of the .deb in Debian's Packages
    # index; offline, apt's own archive cache when it has the package.
    ext=deb
    download() {
      local stem="$1-$2" cached
      if (cd "$3" && apt-get download -q "$1=$2" >/dev/null 2>&1); then
        mv "$3"/"$1"_*.deb "$3/$stem.deb" && return 0
      fi
      cached=$(ls /var/cache/apt/archives/"$1"_"${2//:/%3a}"_*.deb 2>/dev/null | head -n1 || true)
      [ -n "$cached" ] || { echo "fetch-golang-suite: cannot download $1=$2 and apt's cache has none" >&2; return 1; }
      cp "$cached" "$3/$stem.deb"
    }
    ;;
  *) echo "fetch-upstream: unknown suite '$suite' (pypi, crates, golang)" >&2; exit 2 ;;
esac
# Unpack ARCHIVE into DIR/STEM: a tarball holds STEM/ at its top; a Debian Go package holds one
# import path under /usr/share/gocode/src, which becomes the module root (a go.mod naming that
# path is written where the package has none: Go modules need one, GOPATH-era packages lack it).
unpack() {
  local archive="$1" dir="$2" stem="$3"
  if [ "$ext" = deb ]; then
    dpkg-deb -x "$archive" "$dir/deb"
    local roots=("$dir"/deb/usr/share/gocode/src/*/*/*)
    [ ${#roots[@]} -eq 1 ] && [ -d "${roots[0]}" ] || { echo "fetch-golang-suite: $archive holds ${#roots[@]} import paths, expected one" >&2; return 1; }
    local module="${roots[0]#"$dir"/deb/usr/share/gocode/src/}"
    mv "${roots[0]}" "$dir/$stem"
    [ -f "$dir/$stem/go.mod" ] || printf 'module %s\n\ngo 1.19\n' "$module" > "$dir/$stem/go.mod"
  else
    tar -xzf "$archive" -C "$dir"
  fi
}
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
    unpack "$archive" "$tmp" "$stem"
    mv "$tmp/$stem" "$dest/$stem"
    rm -rf "$tmp"
  fi
  echo "fetch-$suite-suite: $stem ready in $dest/$stem"
done
