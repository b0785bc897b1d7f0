#!/usr/bin/env bash
# On a machine with a CUDA GPU, torch/triton/nvcc installed and no network:
# builds the CUDA binding, runs the GPU tests and the microbenchmark, and
# prints a summary table last. Writes everything under ${OUT:-gpu-out}/.
#   bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
start=$(date +%s)
step() { echo "== [$(( $(date +%s) - start ))s] $*"; }

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"

step "build (CUDA binding; pip --no-build-isolation against the installed torch)"
DARA_BUILD_CUDA=1 MAX_JOBS=16 python3 -m pip install -q --no-build-isolation --no-deps --no-index -e . \
  > "$OUT/build.log" 2>&1
build=$?
tail -5 "$OUT/build.log"
python3 -c "import dara_kernels as dk, torch; print('cuda backend:', dk.unavailable_reason('cuda', torch.device('cuda')) or 'available')"

step "GPU tests"
timeout 300 python3 -m pytest -q -x tests/test_cuda_backend.py tests/test_triton_backend.py \
  -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -15
tests=${PIPESTATUS[0]}

step "microbenchmark"
timeout 240 python3 benchmarks/microbench.py --device cuda --budget 0.3 --no-compile-baseline \
  --max-reference-n 16777216 --max-verl-n 16384 --json "$OUT/microbench-cuda.json" \
  --plot "$OUT/microbench-cuda.png" 2>&1 | tee "$OUT/bench.log" | tail -40
bench=${PIPESTATUS[0]}

step "summary"
python3 - "$OUT/microbench-cuda.json" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except OSError:
    print("no benchmark JSON"); sys.exit(0)
bw = data["copy_bandwidth_bytes_per_s"]
print(f"copy bandwidth {bw / 1e9:.0f} GB/s on {data['machine'].get('gpu')}")
print(f"{'N':>10} {'K':>2} {'method':<10} {'layout':<8} {'impl':<7} {'us':>9} {'floor%':>7} {'x ref':>7}")
for row in data["rows"]:
    for impl in ("cuda", "triton"):
        if impl in row["seconds"]:
            s = row["seconds"][impl]
            ref = row["seconds"].get("reference")
            print(f"{row['n']:>10} {row['k']:>2} {row['method']:<10} {row['layout']:<8} {impl:<7} {s * 1e6:9.1f} "
                  f"{100 * row['floor_seconds'] / s:6.1f}% {ref / s if ref else float('nan'):7.1f}")
PY
echo "build=$build tests=$tests bench=$bench elapsed=$(( $(date +%s) - start ))s"
