"""scripts/cuda_resources.py, the gate on nvcc's resource report that scripts/check_cuda_compiles.sh runs in
CI: its parser, its resident-blocks arithmetic and its verdicts, on report lines nvcc 13.0 printed for
csrc/cuda's kernels. Needs no nvcc: check_cuda_compiles.sh runs the gate on the real report."""
import dataclasses
import os
import stat
import subprocess
import sys

import pytest

from dara_kernels import backends, wire
from scripts import cuda_resources as gate

ROOT = gate.ROOT
ACCUMULATE_8 = ("_ZN4dara4cuda46_GLOBAL__N__c1188d28_13_accumulate_cu_158aa32117accumulate_kernelILi8EfEEvNS0_"
                "11CudaProblemENS_10GroupTableENS0_9ReductionENS_15FinalizeOutputsE")
APPLY_2 = ("_ZN4dara4cuda40_GLOBAL__N__933092f2_8_apply_cu_6647cc0f12apply_kernelILi2EfEEvNS0_11CudaProblemENS_"
           "10GroupTableEPKdNS0_16CudaApplyOutputsE")

# accumulate<8, float> as nvcc 13.0 compiled it for sm_90 with no launch bounds (195 registers: one resident
# block), the device function it calls, and apply<2, float> for sm_80.
REPORT = f"""\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '{ACCUMULATE_8}' for 'sm_90'
ptxas info    : Function properties for {ACCUMULATE_8}
    1232 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 195 registers, used 1 barriers, 1232 bytes cumulative stack size, 16 bytes smem
ptxas info    : Compile time = 2470.350 ms
ptxas info    : Function properties for __internal_accurate_pow
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '{APPLY_2}' for 'sm_80'
ptxas info    : Function properties for {APPLY_2}
    80 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 48 registers, used 0 barriers, 80 bytes cumulative stack size, 752 bytes cmem[0]
"""
# accumulate<8, float> for sm_90 under __launch_bounds__(256, 2): held to 128 registers, it spills.
SPILLING = f"""\
ptxas info    : Compiling entry function '{ACCUMULATE_8}' for 'sm_90'
ptxas info    : Function properties for {ACCUMULATE_8}
    1424 bytes stack frame, 448 bytes spill stores, 512 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 1424 bytes cumulative stack size, 16 bytes smem
"""
LAUNCH = gate.Launch(warps_per_block=8, blocks_per_multiprocessor={"kAccumulateBlocksPerMultiprocessor": 1,
                                                                     "kApplyBlocksPerMultiprocessor": 2},
                     max_rewards=16)
SM_80, SM_90 = gate.MULTIPROCESSORS["sm_80"], gate.MULTIPROCESSORS["sm_90"]


def test_kernel_names_read_as_their_template_arguments():
    assert gate.readable(ACCUMULATE_8) == "accumulate_kernel<8, float>"
    assert gate.demangled(APPLY_2) == ("apply_kernel", ("2", "float"))
    assert gate.readable("_Z3fooILb1ELin3EEvv") == "foo<true, -3>"
    # A device function's plain name, and a substitution the reader does not follow, stay as they are.
    assert gate.readable("__internal_accurate_pow") == "__internal_accurate_pow"
    assert gate.readable("_ZN2at6nativeS_3fooEv") == "_ZN2at6nativeS_3fooEv"


def test_the_report_parses_into_kernels_and_their_callees():
    accumulate, pow_, apply = gate.parse(REPORT)
    assert (accumulate.arch, accumulate.entry, accumulate.registers, accumulate.stack, accumulate.static_shared) == \
        ("sm_90", True, 195, 1232, 16)
    assert (pow_.mangled, pow_.arch, pow_.entry) == ("__internal_accurate_pow", "sm_90", False)
    assert (apply.arch, apply.registers, apply.stack, apply.static_shared, apply.spills) == ("sm_80", 48, 80, 0, 0)
    (spilling,) = gate.parse(SPILLING)
    assert (spilling.registers, spilling.spill_stores, spilling.spill_loads) == (128, 448, 512)


@pytest.mark.parametrize("registers, threads, shared, sm, expected", [
    # 195 x 32 rounds up to 6,400 registers a warp: 2 warps in each 16,384-register sub-partition, 8 an SM.
    (195, 256, 16208, SM_90, (1, "registers")),
    (128, 256, 6480, SM_90, (2, "registers")),
    # 4 sub-partitions of 16,384 registers hold 2 warps each: 4 two-warp blocks, not 5 (65,536 / 6,400 = 10 warps).
    (195, 64, 0, SM_90, (4, "registers")),
    (56, 256, 0, SM_80, (4, "registers")),
    (256, 256, 0, SM_80, (0, "registers")),
    (16, 1024, 0, SM_80, (2, "threads")),
    # K = 16's 47,936 dynamic bytes, 16 static and the driver's 1,024 round up to 49,024.
    (32, 256, 47952, SM_80, (3, "shared memory")),
    (32, 256, 47952, SM_90, (4, "shared memory")),
    (16, 32, 0, SM_90, (32, "blocks")),
])
def test_resident_blocks_per_sm(registers, threads, shared, sm, expected):
    assert gate.resident_blocks(registers, threads, shared, sm) == expected


def test_accumulate_shared_bytes_at_the_largest_k():
    """The most columns at K rewards: positive calibration's 1 + K (47,936 bytes at K = 16, launch.h's bound)."""
    assert gate.accumulate_shared_bytes(wire, 16, 8) == 47936
    assert gate.accumulate_shared_bytes(wire, 8, 8) == 16192


def rows(report: str, launch: gate.Launch = LAUNCH) -> list[gate.Row]:
    found, unknown = gate.rows_of(gate.parse(report), launch, wire)
    assert unknown == []
    return found


def test_any_k_kernels_are_sized_at_the_cuda_backends_limit():
    any_k = REPORT.replace("accumulate_kernelILi8EfEE", "accumulate_kernelILi0EfEE")
    assert rows(any_k)[0].dynamic_shared == gate.accumulate_shared_bytes(wire, 16, 8)
    assert LAUNCH.max_rewards == gate.launch_constants().max_rewards == backends.backend("cuda").max_rewards


def test_the_gate_passes_the_kernels_as_they_are():
    assert gate.violations(gate.parse(REPORT), rows(REPORT), LAUNCH) == []


def test_the_gate_fails_on_a_spill():
    (failure,) = gate.violations(gate.parse(SPILLING), rows(SPILLING), LAUNCH)
    assert failure == "accumulate_kernel<8, float> for sm_90 spills: 448 bytes stored, 512 loaded"


def with_blocks(**blocks: int) -> gate.Launch:
    return dataclasses.replace(LAUNCH, blocks_per_multiprocessor={**LAUNCH.blocks_per_multiprocessor, **blocks})


def test_the_gate_fails_when_registers_allow_fewer_blocks_than_launch_h_assumes():
    two = with_blocks(kAccumulateBlocksPerMultiprocessor=2)
    (failure,) = gate.violations(gate.parse(REPORT), rows(REPORT, two), two)
    assert failure == ("accumulate_kernel<8, float> for sm_90: an SM holds at most 1 of its blocks of 256 threads, "
                       "limited by registers (195 registers a thread, 16208 bytes of shared memory a block); "
                       "launch.h's kAccumulateBlocksPerMultiprocessor is 2")


def test_each_kernel_is_held_to_its_own_constant():
    """apply<2, float>'s 48 registers leave an SM 5 of its blocks: enough for apply's constant at 5, not at 6,
    whatever accumulate's is; accumulate's 195 registers leave 1, under apply's 2."""
    five = with_blocks(kApplyBlocksPerMultiprocessor=5)
    assert gate.violations(gate.parse(REPORT), rows(REPORT, five), five) == []
    six = with_blocks(kApplyBlocksPerMultiprocessor=6)
    (failure,) = gate.violations(gate.parse(REPORT), rows(REPORT, six), six)
    assert failure.startswith("apply_kernel<2, float> for sm_80: an SM holds at most 5 of its blocks")
    assert failure.endswith("launch.h's kApplyBlocksPerMultiprocessor is 6")
    assert [row.constant for row in rows(REPORT)] == ["kAccumulateBlocksPerMultiprocessor",
                                                      "kApplyBlocksPerMultiprocessor"]


def test_the_gate_reads_each_kernels_constant_from_launch_h():
    launch = gate.launch_constants()
    assert set(launch.blocks_per_multiprocessor) == set(gate.BLOCKS_PER_MULTIPROCESSOR.values())
    assert set(gate.BLOCKS_PER_MULTIPROCESSOR) == set(gate.DYNAMIC_SHARED)


def test_the_gate_fails_over_the_shared_memory_a_launch_takes_without_an_attribute():
    any_k = REPORT.replace("accumulate_kernelILi8EfEE", "accumulate_kernelILi0EfEE").replace("16 bytes smem",
                                                                                             "1232 bytes smem")
    (failure,) = gate.violations(gate.parse(any_k), rows(any_k), LAUNCH)
    assert failure.startswith("accumulate_kernel<0, float> for sm_90 takes 49168 bytes of shared memory a block")


def write(tmp_path, text: str):
    path = tmp_path / "report.txt"
    path.write_text(text)
    return path


def test_main_prints_the_table_and_exits_by_the_gate(tmp_path, capsys):
    assert gate.main([str(write(tmp_path, REPORT))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["kernel", "arch", "registers"]
    assert out[1].split()[:3] == ["accumulate_kernel<8,", "float>", "sm_90"]
    assert gate.main(["--markdown", str(write(tmp_path, REPORT))]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1] == "| --- " * len(gate.COLUMNS) + "|"
    assert table[3] == "| apply_kernel<2, float> | sm_80 | 48 | 80 | 0/0 | 0 + 0 | 5 (registers) |"
    assert gate.main([str(write(tmp_path, SPILLING))]) == 1
    assert "resource gate FAILED: accumulate_kernel<8, float> for sm_90 spills" in capsys.readouterr().err


@pytest.mark.parametrize("report, reason", [
    ("ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_90'\n", "kernel for sm_90: no dynamic shared"),
    ("nvcc printed nothing of use\n", "no kernel in the report"),
])
def test_main_fails_on_a_report_it_cannot_gate(tmp_path, capsys, report, reason):
    assert gate.main([str(write(tmp_path, report))]) == 1
    assert reason in capsys.readouterr().err


def test_a_kernel_without_its_launch_h_constant_fails_the_gate(tmp_path, capsys, monkeypatch):
    monkeypatch.delitem(gate.BLOCKS_PER_MULTIPROCESSOR, "apply_kernel")
    assert gate.main([str(write(tmp_path, REPORT))]) == 1
    assert "apply_kernel<2, float> for sm_80: no dynamic shared size, launch.h constant" in capsys.readouterr().err


def test_a_header_without_the_constant_stops_the_gate(tmp_path):
    header = tmp_path / "launch.h"
    header.write_text("constexpr int kWarpsPerBlock = 8;\n")
    assert gate.header_constant(header, "kWarpsPerBlock") == 8
    with pytest.raises(SystemExit, match="no `constexpr int kApplyBlocksPerMultiprocessor = N;`"):
        gate.header_constant(header, "kApplyBlocksPerMultiprocessor")


@pytest.mark.parametrize("report, status", [(REPORT, 0), (SPILLING, 1)])
def test_check_cuda_compiles_fails_on_the_gate(tmp_path, report, status):
    """scripts/check_cuda_compiles.sh (CI's first step) with an nvcc that prints `report` for every compile."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncat <<'EOF'\n{report}EOF\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    done = subprocess.run(["bash", "scripts/check_cuda_compiles.sh"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NVCC": str(nvcc), "PYTHON": sys.executable})
    assert done.returncode == status, done.stderr
    assert "accumulate_kernel<8, float>" in done.stdout
