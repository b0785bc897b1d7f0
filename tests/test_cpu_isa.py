"""The CPU kernel's two instruction-set copies (csrc/cpu/cpu_isa.h) give the
same bits: the wide copy runs here when the CPU has it, the baseline copy in
a child process started with DARA_CPU_ISA=baseline. And the per-group loops
that the wide copy exists for do run in SIMD lanes."""
import ast
import os
import platform
import re
import shutil
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


# The batch loops over groups (csrc/cpu/complete_groups.h) that GCC vectorises
# only while the column formulas stay branch-free selects between doubles: a
# select on a bool option, and they silently turn scalar (they were, and
# FinishReward alone took 16% of a call's time, 5% once vectorised).
GROUP_LOOPS = {
    "GroupReciprocals": "int64_t, dara::ColumnRule, const double*, double*, double*",
    "FinishReward": "int64_t, dara::ColumnRule, double" + ", const double*" * 6 + ", double*" * 7,
}


def loop_line(header: Path, struct: str) -> int:
    lines = header.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"struct {struct} "))
    return next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("for (")) + 1


@pytest.mark.skipif(platform.machine() != "x86_64" or shutil.which("g++") is None,
                    reason="the wide copy is x86-64 and GCC's")
def test_group_loops_run_in_simd_lanes(tmp_path):
    from torch.utils.cpp_extension import include_paths

    setup = (ROOT / "setup.py").read_text()
    flags = ast.literal_eval(re.search(r"cxx = (\[.*?\])", setup).group(1))
    header = ROOT / "csrc" / "cpu" / "complete_groups.h"
    source = tmp_path / "group_loops.cpp"
    source.write_text(f'#include "{header}"\n' + "".join(
        f"template void dara::run_loop_wide<dara::{name}>({args});\n" for name, args in GROUP_LOOPS.items()))
    report = subprocess.run(
        ["g++", *flags, *(f"-I{p}" for p in include_paths()), "-fopt-info-vec-optimized", "-c", str(source),
         "-o", str(tmp_path / "group_loops.o")], capture_output=True, text=True, timeout=120, check=True).stderr
    for name in GROUP_LOOPS:
        line = loop_line(header, name)
        assert f"complete_groups.h:{line}:" in report and "32 byte vectors" in "".join(
            r for r in report.splitlines() if f"complete_groups.h:{line}:" in r), (name, line, report)
