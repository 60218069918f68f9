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
# Download NAME VERSION into $dest/NAME-VERSION.$ext unless a verified copy is there; prints 1
# where it downloaded.
fetch_archive() {
  local name="$1" version="$2" sha256="$3" stem="$1-$2" tmp got
  local archive="$dest/$stem.$ext"
  if [ ! -f "$archive" ] || [ "$(sha256sum "$archive" | cut -d' ' -f1)" != "$sha256" ]; then
    tmp="$(mktemp -d)"
    download "$name" "$version" "$tmp"
    got="$(sha256sum "$tmp/$stem.$ext" | cut -d' ' -f1)"
    if [ "$got" != "$sha256" ]; then
      echo "fetch-$suite-suite: $stem.$ext has sha256 $got, expected $sha256" >&2
      rm -rf "$tmp"
      return 1
    fi
    mv "$tmp/$stem.$ext" "$archive"
    rm -rf "$tmp"
    echo 1
  fi
}
# A Go library's dependencies (`[[upstream.deps]]`, Debian golang-*-dev packages too) become its
# vendor directory: each one's import path without its tests, vendor/modules.txt, and a go.mod
# requiring exactly those versions (the Debian version without its revision) at a go version
# that honours the vendored modules' own (>= 1.17). `go test` then builds offline in vendor mode
# with no flag: the task's command stays `go test`.
vendor_go() {
  local root="$1" deps="$2" dep dname dversion tmp
  for dep in ${deps//,/ }; do
    IFS== read -r dname dversion _ <<< "$dep"
    tmp="$(mktemp -d)"
    dpkg-deb -x "$dest/$dname-$dversion.deb" "$tmp"
    python3 - "$root" "$tmp/usr/share/gocode/src" "$dversion" <<'PY'
import pathlib, re, shutil, sys
root, src, version = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
paths = [p for p in src.glob("*/*/*") if p.is_dir()]
if len(paths) != 1:
    sys.exit(f"fetch-golang-suite: a dependency package holds {len(paths)} import paths, expected one")
module = str(paths[0].relative_to(src))
to = root / "vendor" / module
shutil.copytree(paths[0], to, ignore=shutil.ignore_patterns("*_test.go", "testdata", ".*"))
gomod = paths[0] / "go.mod"
go = re.search(r"^go ([0-9.]+)$", gomod.read_text(), re.M).group(1) if gomod.exists() else "1.17"
semver = "v" + version.split(":")[-1].rsplit("-", 1)[0]
with open(root / "vendor" / "modules.txt", "a") as f:
    f.write(f"# {module} {semver}\n## explicit; go {go}\n{module}\n")
PY
    rm -rf "$tmp"
  done
  python3 - "$root" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
text = (root / "vendor" / "modules.txt").read_text()
mods = re.findall(r"^# (\S+) (\S+)$", text, re.M)
gos = re.findall(r"^## explicit; go (\S+)$", text, re.M)
old = (root / "go.mod").read_text()
module = re.search(r"^module (\S+)$", old, re.M).group(1)
version = lambda v: tuple(int(x) for x in v.split("."))
go = max([m for m in re.findall(r"^go ([0-9.]+)$", old, re.M)] + gos + ["1.17"], key=version)
require = "".join(f"\t{m} {v}\n" for m, v in mods)
(root / "go.mod").write_text(f"module {module}\n\ngo {go}\n\nrequire (\n{require})\n")
(root / "go.sum").unlink(missing_ok=True)
PY
}
python3 - "$here/tests/fixtures/suites/$suite" <<'PY' | while read -r name version sha256 deps; do
import pathlib, sys, tomllib
for project in sorted(pathlib.Path(sys.argv[1]).glob("*/project.toml")):
    up = tomllib.loads(project.read_text()).get("upstream")
    if up:
        deps = ",".join(f"{d['name']}={d['version']}={d['sha256']}" for d in up.get("deps", [])) or "-"
        print(up["name"], up["version"], up["sha256"], deps)
PY
  stem="$name-$version"
  fresh="$(fetch_archive "$name" "$version" "$sha256")"
  [ "$deps" = - ] && deps=""
  for dep in ${deps//,/ }; do
    IFS== read -r dname dversion dsha <<< "$dep"
    fresh="$fresh$(fetch_archive "$dname" "$dversion" "$dsha")"
  done
  [ -z "$fresh" ] || rm -rf "${dest:?}/$stem"
  if [ ! -d "$dest/$stem" ]; then
    tmp="$(mktemp -d "$dest/.unpack-XXXXXX")"
    unpack "$dest/$stem.$ext" "$tmp" "$stem"
    [ -z "$deps" ] || vendor_go "$tmp/$stem" "$deps"
    mv "$tmp/$stem" "$dest/$stem"
    rm -rf "$tmp"
  fi
  echo "fetch-$suite-suite: $stem ready in $dest/$stem"
done
