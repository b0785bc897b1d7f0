#!/usr/bin/env bash
# Compiles every .cu file under csrc/cuda with nvcc for sm_80 and sm_90 and
# fails on any error or warning. Needs nvcc, not a GPU and not torch.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "[dara] nvcc not found: cannot check the CUDA kernels" >&2
  exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for arch in sm_80 sm_90; do
  for src in csrc/cuda/*.cu; do
    if "$NVCC" -arch="$arch" -std=c++17 -O3 --expt-relaxed-constexpr -Werror all-warnings \
        -Xcompiler -Wall,-Wextra,-Werror -c "$src" -o "$out/$(basename "$src" .cu)-$arch.o"; then
      echo "[dara] nvcc $arch ok: $src"
    else
      echo "[dara] nvcc $arch FAILED: $src" >&2
      status=1
    fi
  done
done
exit $status
