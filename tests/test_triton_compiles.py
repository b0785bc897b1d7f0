"""The Triton kernels compile for a real GPU target, here, without a GPU.

The interpreter that runs the other Triton tests on a CPU machine never
compiles a kernel, so it hid (for example) a kernel that read a plain Python
global. This smoke compiles one call shape per layout and method for sm_90 in
a subprocess without the interpreter; CI compiles every variant
(scripts/check_triton_compiles.py)."""
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
