#!/usr/bin/env bash
# Compiles every .cu file under csrc/cuda with nvcc for sm_80 and sm_90 and
# fails on any error or warning, then gates ptxas's resource report of every
# kernel instantiation (scripts/cuda_resources.py): it fails on any spill, or
# on fewer resident blocks per SM than csrc/cuda/launch.h assumes. Needs nvcc
# and python3, not a GPU and not torch.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
PYTHON=${PYTHON:-python3}
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "[dara] nvcc not found: cannot check the CUDA kernels" >&2
  exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for arch in sm_80 sm_90; do
  for src in csrc/cuda/*.cu; do
    name="$(basename "$src" .cu)-$arch"
    if "$NVCC" -arch="$arch" -std=c++17 -O3 --expt-relaxed-constexpr -Werror all-warnings --resource-usage \
        -Xcompiler -Wall,-Wextra,-Werror -c "$src" -o "$out/$name.o" >"$out/$name.report" 2>&1; then
      echo "[dara] nvcc $arch ok: $src"
    else
      cat "$out/$name.report" >&2
      echo "[dara] nvcc $arch FAILED: $src" >&2
      status=1
    fi
  done
done
"$PYTHON" scripts/cuda_resources.py "$out"/*.report || status=1
exit $status
