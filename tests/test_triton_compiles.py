"""The Triton kernels go through Triton's own launch path and compile for a
real GPU target, here, without a GPU.

The interpreter that runs the other Triton tests on a CPU machine never
compiles a kernel and launches through its own binder, so it hid a kernel
that read a plain Python global, and a kernel parameter named `options`
(Triton's launch binder is `def dynamic_func(<parameters>, **options)`: every
launch on a GPU was a SyntaxError). These run scripts/check_triton_compiles.py
in a subprocess without the interpreter: every launch the op makes through
JITFunction.run up to the launch, and one call shape per layout and method
compiled for sm_90; CI compiles every variant."""
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")
SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "check_triton_compiles.py"


def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--arch", "90", "--jobs", "1"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 failures" in result.stdout


def test_every_launch_goes_through_the_runtimes_launch_path():
    """Every call shape and every value of every option the check sweeps, for sm_80 and sm_90: the runtime's
    binder binds the arguments the driver passes, and no option value or size specialises a kernel."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--bind-only", "--options"], capture_output=True,
                            text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 failures" in result.stdout and " 0 distinct" not in result.stdout


KERNELS = """
import triton
import triton.language as tl


@triton.jit
def takes_options(x_ptr, options):
    tl.store(x_ptr, options)


@triton.jit
def specialised(x_ptr, n):
    tl.store(x_ptr, n)
"""

PROBE = """
import importlib.util, sys, torch
sys.path.insert(0, sys.argv[2])
spec = importlib.util.spec_from_file_location("aot", sys.argv[1])
aot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(aot)
import kernels
x = torch.empty(1, device="meta")
for kernel, value in ((kernels.takes_options, 1.0), (kernels.specialised, 1)):
    try:
        print(kernel.fn.__name__, aot.runtime_variant((kernel, (1,), (x, value), {}), 90)["specialised"])
    except aot.LaunchRefused as err:
        print(kernel.fn.__name__, "refused:", err)
"""


def test_the_launch_path_check_sees_what_a_gpu_would_refuse(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", PROBE, str(SCRIPT), str(tmp_path)], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "takes_options refused: takes_options sm_90: the runtime's launch path raised SyntaxError: duplicate " \
        "argument 'options'" in result.stdout, result.stdout
    assert "specialised ['n']" in result.stdout, result.stdout


def test_interpreter_only_without_a_gpu(monkeypatch):
    from tests.conftest import interpreter_wanted

    monkeypatch.delenv("DARA_TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert not interpreter_wanted()
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert interpreter_wanted()
    monkeypatch.setenv("DARA_TRITON_INTERPRET", "1")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert interpreter_wanted()
