#!/usr/bin/env bash
# Real-project images in the SWE-bench layout for tests/official_real_docker.rs (Django, sympy,
# inflection from PyPI, their swebench 5.x rows): scripts/official-real-images.py, after the
# docker image and swebench 5.0.2 it needs. It runs in the background (a few minutes of
# downloads, image builds and validation runs, overlapping the test build); its state is in
# official-real/build.status under the cache (running, ok, or failed), which the test waits for.
# Any failure only makes that test skip with a message, never fails CI.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${EXECCRITIC_CACHE:-$HOME/.cache/execcritic}/official-real"
mkdir -p "$dir"
bash scripts/ci-deps-swebench.sh
if ! docker image inspect "${EXECCRITIC_DOCKER_IMAGE:-execcritic-pytest:latest}" >/dev/null 2>&1; then
  echo "failed: no docker image to build on (scripts/ci-deps-harness.sh)" > "$dir/build.status"
  exit 0
fi
echo running > "$dir/build.status"
nohup setsid bash -c '
  if python3 scripts/official-real-images.py > "$1/build.log" 2>&1; then echo ok; else echo "failed: see $1/build.log"; fi > "$1/build.status.tmp"
  mv "$1/build.status.tmp" "$1/build.status"' _ "$dir" >/dev/null 2>&1 &
echo "ci-deps-official-real: building the real-project images in the background ($dir/build.log)"
exit 0
