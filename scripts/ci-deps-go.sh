#!/usr/bin/env bash
# Go toolchain for the `go test` runner's tests (tests/harness_native_guard.rs): Debian's
# golang-go (Go 1.19 on bookworm), offline once installed; the local sandbox sees it through its
# read-only /usr. Idempotent. Any failure only means the Go tests skip with a message.
set -uo pipefail
if command -v go >/dev/null 2>&1; then
  echo "ci-deps-go: $(go version)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq golang-go >/dev/null \
  || { echo "ci-deps-go: apt failed; the Go tests will skip"; exit 0; }
echo "ci-deps-go: $(go version)"
