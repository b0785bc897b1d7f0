#!/usr/bin/env bash
# CI step, no GPU needed: builds dara-kernels against one torch release, in a
# venv of its own, and runs the op suite against that build.
#   bash scripts/check_torch_build.sh cuda torch==2.11.0 "numpy<2.4"
#   bash scripts/check_torch_build.sh --trace-only cuda torch==2.14.0 "numpy<2.4"
#   bash scripts/check_torch_build.sh cpu torch==2.8.0 "numpy<2.4"
#   bash scripts/check_torch_build.sh --install-only cuda torch==2.11.0 "numpy<2.4"
# The arguments after the mode are what pip installs besides pytest, ninja and
# pyyaml: the torch, and any pins that torch's environment needs (numpy<2.4:
# the Triton interpreter the tests run, 3.4 with torch 2.8 and 3.6 with 2.11,
# breaks on numpy 2.4).
# cuda: the build with the CUDA extension (a CUDA torch whose CUDA major
#   version is nvcc's, CUDA_HOME=/usr/local/cuda unless set, sm_80, sm_90 and
#   PTX as setup.py builds them without a visible GPU); checks that the CPU and
#   CUDA kernels registered and that the binary carries that device code; the
#   op suite plus the Triton-interpreter tests and the GPU paths traced on fake
#   CUDA tensors (tests/test_fake_cuda.py) against that CUDA build.
# cpu: DARA_BUILD_CUDA=0 (the CPU kernels only, as a CUDA torch beside a
#   toolkit of another CUDA version builds); the op suite.
# --install-only creates the venv and installs its packages, nothing more (CI
# does that in the background while the cores do the step before).
# --trace-only runs, after the build and its registration check, only the
# tests of the op's registration and of the GPU paths traced on fake CUDA
# tensors (TRACE_SUITE): what a further torch release can break there, in a
# third of the full check's time (CI's second CUDA torch).
# The venv, ${DARA_VENV:-.venv}-MODE-TORCH (e.g. .venv-cuda-torch2.11.0), is
# created once and reused; DARA_PRUNE_ENVS=1 removes it when the check ends
# (a CUDA torch's venv holds 5 to 7 GB). The package is installed editable from a copy of
# the checkout inside the venv: an editable build writes dara_kernels/_C*.so
# into its source tree, and the checkout's own .so belongs to the CPU-torch
# environment of scripts/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_ONLY= TRACE_ONLY=
case "${1:-}" in
  --install-only) INSTALL_ONLY=1; shift ;;
  --trace-only) TRACE_ONLY=1; shift ;;
esac
MODE=${1:-}
TORCH_SPEC=${2:-}
case "$MODE" in cuda | cpu) ;; *)
  echo "usage: bash scripts/check_torch_build.sh [--install-only|--trace-only] {cuda|cpu} TORCH_SPEC [PIP_SPEC...]" >&2
  exit 2 ;;
esac
[ -n "$TORCH_SPEC" ] || { echo "check_torch_build.sh: name the torch to build against, e.g. torch==2.8.0" >&2; exit 2; }
shift 2
EXTRA_SPECS=("$@")
VENV=$(realpath -m "${DARA_VENV:-.venv}-$MODE-${TORCH_SPEC//[^A-Za-z0-9.]/}")
PY="$VENV/bin/python"
SRC="$VENV/dara-src"
# The kernel and op tests: what a torch release can break.
OP_SUITE=(tests/test_torch_op.py tests/test_cpu_backend.py tests/test_validation.py
  tests/test_presets.py tests/test_reference.py tests/test_backend_choice.py tests/test_wire.py
  tests/test_distributed.py tests/test_setup_checks.py)
TRACE_SUITE=(tests/test_torch_op.py tests/test_fake_cuda.py)
total_start=$(date +%s)
if [ -n "${DARA_PRUNE_ENVS:-}" ] && [ -z "$INSTALL_ONLY" ]; then
  trap 'echo "[dara $MODE-build $TORCH_SPEC] removing $VENV (DARA_PRUNE_ENVS)" >&2; rm -rf "$VENV"' EXIT
fi

log() { echo "[dara $MODE-build $TORCH_SPEC] $*" >&2; }
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
  "$PY" -m pip install -q "$TORCH_SPEC" "${EXTRA_SPECS[@]}" numpy pytest ninja pyyaml || return
  [ "$MODE" = cpu ] \
    || "$PY" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' has no CUDA')"
}

copy_checkout() {
  rm -rf "$SRC" && mkdir -p "$SRC" || return
  # Tracked files deleted in the work tree are skipped (--ignore-failed-read), as a commit would drop them.
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$SRC"
}

build() {
  if [ "$MODE" = cuda ]; then
    # As on a GPU-less machine, whatever this one has.
    (cd "$SRC" && env CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX" \
      CUDA_VISIBLE_DEVICES= DARA_BUILD_CUDA=1 MAX_JOBS="${MAX_JOBS:-2}" \
      "$PY" -m pip install -q --no-build-isolation --no-deps -e .)
  else
    (cd "$SRC" && DARA_BUILD_CUDA=0 MAX_JOBS="${MAX_JOBS:-2}" "$PY" -m pip install -q --no-build-isolation --no-deps -e .)
  fi
}

check_registration() {
  (cd "$SRC" && DARA_CHECK_MODE=$MODE "$PY" - <<'PY'
import glob
import os
import subprocess

import torch

import dara_kernels
from dara_kernels import _ops

assert dara_kernels.extension_available(), "dara_kernels._C did not load"
keys = ("CPU", "CUDA") if os.environ["DARA_CHECK_MODE"] == "cuda" else ("CPU",)
for op in ("dara::fused_advantage", "dara::accumulate"):
    for key in keys:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, key), f"{op} has no {key} kernel"
# The flag backend choice reads (_C.built_with_cuda) says what the dispatcher has.
assert _ops.CUDA_KERNELS_COMPILED == ("CUDA" in keys), f"CUDA_KERNELS_COMPILED is {_ops.CUDA_KERNELS_COMPILED}"
print(f"torch {torch.__version__}: {' and '.join(keys)} kernels registered")
if "CUDA" in keys:
    import triton

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
  local tests=("${OP_SUITE[@]}")
  [ "$MODE" = cuda ] && tests+=(tests/test_triton_backend.py tests/test_triton_compiles.py tests/test_fake_cuda.py)
  [ -n "$TRACE_ONLY" ] && tests=("${TRACE_SUITE[@]}")
  (cd "$SRC" && "$PY" -m pytest -q -p no:cacheprovider "${tests[@]}")
}

if [ ! -x "$PY" ]; then timed "create $VENV" create_venv; fi
if ! "$PY" -c "import torch, numpy, pytest, ninja, yaml" 2>/dev/null; then
  timed "install $TORCH_SPEC ${EXTRA_SPECS[*]:+${EXTRA_SPECS[*]} }numpy pytest ninja pyyaml" install_dependencies
fi
[ -z "$INSTALL_ONLY" ] || exit 0
timed "copy the checkout to $SRC" copy_checkout
timed "build (MAX_JOBS=${MAX_JOBS:-2})" build
timed "check the kernel registration" check_registration
timed "${TRACE_ONLY:+trace }op suite" run_tests
log "total: $(( $(date +%s) - total_start ))s"
