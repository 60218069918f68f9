#!/usr/bin/env bash
# Harness CI dependencies (idempotent): docker daemon + the local test image `execcritic-pytest`
# (Debian bookworm minbase + python3 (also as `python`), pytest, git, patch), built without any registry:
# debootstrap from the Debian mirror, then `docker import`.
# Any failure here only means the docker sandbox tests skip with a message; it never fails CI.
set -uo pipefail
IMAGE="${EXECCRITIC_DOCKER_IMAGE:-execcritic-pytest:latest}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
export DEBIAN_FRONTEND=noninteractive

# The local-sandbox environment_setup test builds a venv with a development-mode install.
if ! python3 -c 'import setuptools, venv' >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq python3-setuptools python3-venv >/dev/null \
    || echo "ci-deps-harness: python3-setuptools not installed; the venv environment test will skip"
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# An ssh:// docker host for tests/harness_docker_ssh.rs (sshd on a loopback port).
[ -x /usr/sbin/sshd ] || need+=(openssh-server openssh-client)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  echo "ci-deps-harness: installing ${need[*]}"
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null || { echo "ci-deps-harness: apt failed; docker tests will skip"; exit 0; }
fi

if ! docker info >/dev/null 2>&1; then
  echo "ci-deps-harness: starting dockerd"
  nohup dockerd --iptables=false --bridge=none >/tmp/execcritic-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "ci-deps-harness: dockerd did not start (see /tmp/execcritic-dockerd.log); docker tests will skip"; exit 0; }
fi

# The bundled task suite names its image `execcritic-suite:latest`: the same image under that tag.
tag_suite() { docker tag "$IMAGE" execcritic-suite:latest >/dev/null 2>&1 || true; }
# An image of an older version of this script lacks `python` (bundles may say `python -m pytest`).
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  if docker run --rm --network none "$IMAGE" sh -c 'command -v python' >/dev/null 2>&1; then
    echo "ci-deps-harness: image $IMAGE present"
    tag_suite
    exit 0
  fi
  echo "ci-deps-harness: image $IMAGE lacks python; rebuilding"
fi
ROOTFS="$(mktemp -d /tmp/execcritic-rootfs.XXXXXX)"
echo "ci-deps-harness: debootstrap into $ROOTFS"
if debootstrap --variant=minbase --include=python3,python-is-python3,python3-pytest,git,patch,procps,coreutils \
    bookworm "$ROOTFS" "$MIRROR" >/tmp/execcritic-debootstrap.log 2>&1; then
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  tar -C "$ROOTFS" -c . | docker import -c 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null \
    && { echo "ci-deps-harness: built $IMAGE"; tag_suite; } || echo "ci-deps-harness: docker import failed; docker tests will skip"
else
  echo "ci-deps-harness: debootstrap failed (see /tmp/execcritic-debootstrap.log); docker tests will skip"
fi
rm -rf "$ROOTFS"
exit 0
