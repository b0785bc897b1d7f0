"""The CUDA kernels (csrc/cuda) run on the CPU: the same .cu files compiled by
g++ under an emulation of the CUDA execution model (tests/cuda_emulation:
threads as fibers, adversarial seeded orders, shared memory allocated per
block at its launched size), with ASan and UBSan, against the float64
reference. Each scenario runs in its own process, which starts with ASan's
runtime; this one is not instrumented. What this shows and what it cannot:
docs/architecture.md#the-cuda-kernels-on-the-cpu."""
import platform
import subprocess
import sys

import pytest

import dara_kernels as dk
from tests.cuda_emulation import build

pytestmark = [
    pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                       reason="the emulation's fibers switch stacks in x86-64 assembly (Linux)"),
    pytest.mark.skipif(not dk.extension_available(), reason="the emulation links dara_kernels._C (not built)"),
]

# Seconds a scenario may take on 2 loaded cores: each runs in well under a minute on an idle one.
SCENARIO_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def library():
    return build.build()


def run_scenario(library, scenario: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.cuda_emulation.scenarios", scenario, str(library)],
                          cwd=build.ROOT, env=build.asan_environment(), capture_output=True, text=True,
                          timeout=SCENARIO_TIMEOUT_S)


def assert_passes(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-20000:]}"


def test_check_sweep_matches_the_reference(library):
    """Every call of the check (python -m dara_kernels.check) at the CUDA backend's tolerances."""
    assert_passes(run_scenario(library, "sweep"))


def test_given_accumulators_on_two_ranks(library):
    assert_passes(run_scenario(library, "distributed"))


def test_grid_shapes_and_block_orders(library):
    assert_passes(run_scenario(library, "grids"))


def test_divergence_and_launch_limits_are_errors(library):
    assert_passes(run_scenario(library, "faults"))


def test_a_read_past_shared_memory_stops_under_asan(library):
    done = run_scenario(library, "overflow")
    assert done.returncode != 0, done.stdout
    assert "AddressSanitizer: heap-buffer-overflow" in done.stderr, done.stderr[-20000:]
    assert "in shared_overflow tests/cuda_emulation/faulty_kernels.cu:" in done.stderr, done.stderr[-20000:]
