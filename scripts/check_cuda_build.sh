#!/usr/bin/env bash
# CI step, no GPU needed: builds dara-kernels WITH its CUDA extension against
# a CUDA torch, checks that the CUDA kernels registered and that the binary
# carries sm_80 and sm_90 code plus PTX for newer GPUs, then runs the CPU and
# Triton-interpreter tests against that build.
#   bash scripts/check_cuda_build.sh
# The venv (default ${DARA_VENV:-.venv}-cuda, override with DARA_CUDA_VENV) is
# created once with DARA_CUDA_TORCH_SPEC (default torch==2.14.1, a cu130 build
# matching nvcc 13.0) and reused. The package is installed editable from a
# copy of the checkout inside the venv: an editable build writes
# dara_kernels/_C*.so into its source tree, and the checkout's own .so belongs
# to the CPU-torch environment of scripts/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(realpath -m "${DARA_CUDA_VENV:-${DARA_VENV:-.venv}-cuda}")
TORCH_SPEC=${DARA_CUDA_TORCH_SPEC:-torch==2.14.1}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PY="$VENV/bin/python"
SRC="$VENV/dara-src"
total_start=$(date +%s)

log() { echo "[dara cuda-build] $*" >&2; }
# Steps run as `if` conditions, where bash ignores set -e: each step's status is its last command's.
timed() {
  local name=$1 t0 status
  shift
  t0=$(date +%s)
  log "$name ..."
  if "$@"; then
    log "$name: $(( $(date +%s) - t0 ))s"
  else
    status=$?
    log "$name: FAILED (exit $status) after $(( $(date +%s) - t0 ))s"
    exit "$status"
  fi
}

create_venv() {
  python3 -m venv "$VENV" && "$PY" -m pip install -q --upgrade pip setuptools wheel
}

install_dependencies() {
  "$PY" -m pip install -q "$TORCH_SPEC" numpy pytest triton ninja pyyaml && "$PY" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' has no CUDA')"
}

copy_checkout() {
  rm -rf "$SRC" && mkdir -p "$SRC" || return
  # Tracked files deleted in the work tree are skipped (--ignore-failed-read), as a commit would drop them.
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$SRC"
}

build() {
  # As on a GPU-less machine, whatever this one has: setup.py's default architectures are what gets checked.
  (cd "$SRC" && env -u TORCH_CUDA_ARCH_LIST CUDA_VISIBLE_DEVICES= DARA_BUILD_CUDA=1 MAX_JOBS="${MAX_JOBS:-2}" \
    "$PY" -m pip install -q --no-build-isolation --no-deps -e .)
}

check_registration() {
  (cd "$SRC" && "$PY" - <<'PY'
import glob
import os
import subprocess

import torch
import triton

import dara_kernels

assert dara_kernels.extension_available(), "dara_kernels._C did not load"
for op in ("dara::fused_advantage", "dara::accumulate"):
    for key in ("CPU", "CUDA"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, key), f"{op} has no {key} kernel"
print(f"torch {torch.__version__}: CPU and CUDA kernels registered")

(library,) = glob.glob(os.path.join(os.path.dirname(dara_kernels.__file__), "_C*.so"))
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
listing = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", library], check=True, capture_output=True,
                         text=True).stdout
for needed in ("sm_80", "sm_90", ".ptx"):
    assert needed in listing, f"{library} carries no {needed}:\n{listing}"
print(listing.strip())
PY
  )
}

run_tests() {
  (cd "$SRC" && "$PY" -m pytest -q -p no:cacheprovider tests \
    --ignore=tests/integrations)
}

if [ ! -x "$PY" ]; then timed "create $VENV" create_venv; fi
if ! "$PY" -c "import torch, numpy, pytest, triton, ninja, yaml; assert torch.version.cuda" 2>/dev/null; then
  timed "install $TORCH_SPEC numpy pytest triton ninja pyyaml" install_dependencies
fi
timed "copy the checkout to $SRC" copy_checkout
timed "build with the CUDA extension (MAX_JOBS=${MAX_JOBS:-2})" build
timed "check the CUDA registration and device code" check_registration
timed "CPU and Triton-interpreter tests" run_tests
log "total: $(( $(date +%s) - total_start ))s"
