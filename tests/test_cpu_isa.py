"""The CPU kernel's two instruction-set copies (csrc/cpu/cpu_isa.h) give the
same bits: the wide copy runs here when the CPU has it, the baseline copy in
a child process started with DARA_CPU_ISA=baseline."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dara_kernels as dk
from tests.cases import make_case

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")

ROOT = Path(__file__).resolve().parents[1]


def outputs(method: str, layout: str, k: int, preset) -> dict:
    case = make_case(11, layout, k, shape=(1025,))
    out = dk.fused_advantage(case.rewards, method=method, preset=preset, backend="cpu",
                             **case.kwargs(with_mask=preset == "verl"))
    return {name: value for name, value in out._asdict().items() if isinstance(value, torch.Tensor)}


CASES = [(method, layout, k, preset) for method in dk.METHODS for layout, k, preset in
         (("contiguous", 4, None), ("shuffled", 3, "verl"), ("contiguous", 5, "trl"))]


def test_baseline_copy_matches_wide_copy(tmp_path):
    script = ("import sys, torch; from tests.test_cpu_isa import CASES, outputs; "
              "torch.save([outputs(*c) for c in CASES], sys.argv[1])")
    saved = tmp_path / "baseline.pt"
    env = {**os.environ, "DARA_CPU_ISA": "baseline", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script, str(saved)], check=True, cwd=ROOT, env=env, timeout=300)
    for case, baseline in zip(CASES, torch.load(saved)):
        here = outputs(*case)
        assert here.keys() == baseline.keys()
        for name, value in here.items():
            assert torch.equal(value, baseline[name]) or (
                value.is_floating_point() and torch.equal(value.isnan(), baseline[name].isnan())
                and torch.equal(value.nan_to_num(), baseline[name].nan_to_num())), (case, name)
