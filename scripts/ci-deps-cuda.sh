#!/usr/bin/env bash
# CUDA area: NVRTC from its PyPI wheel, so the kernel compile test (tests/cuda_nvrtc.rs) can turn
# every kernels/*.cu into PTX for sm_90 on a machine without a GPU or CUDA toolkit. Idempotent.
set -euo pipefail
if python3 - <<'PY' >/dev/null 2>&1
import glob, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
sys.exit(0 if any(glob.glob(r + "/nvidia/**/libnvrtc.so*", recursive=True) for r in roots) else 1)
PY
then
  exit 0
fi
echo "ci-deps-cuda: installing nvidia-cuda-nvrtc 13.x (libnvrtc for the kernel compile test)"
python3 -m pip install -q "nvidia-cuda-nvrtc>=13,<14" 2>/dev/null \
  || python3 -m pip install -q --break-system-packages "nvidia-cuda-nvrtc>=13,<14"
