"""The emulated CUDA backend's checks, each run in a process that starts with
ASan's runtime (tests/test_cuda_emulation.py starts one a scenario):

    python -m tests.cuda_emulation.scenarios SCENARIO LIBRARY

The library's ops serve a test-only backend record, "cuda_emulated" (the
CUDA backend's column limit and tolerances, CPU tensors), registered for the
run, so dara_kernels.fused_advantage(..., backend="cuda_emulated") runs the
CUDA kernels. Prints what it ran; exits 1 with every failure listed."""
from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import pathlib
import sys
import tempfile
import time
from typing import Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dara_kernels import _ops, backends, wire
from dara_kernels.check.cases import make_case
from dara_kernels.check.compare import compare
from dara_kernels.check.runner import BackendResult, check_calls, compare_backends, sweep_settings
from dara_kernels.check.sweeps import Call
from dara_kernels.check.table_sweeps import k_range_calls
from dara_kernels.output import AdvantageOutput
from dara_kernels.wire import OUTPUT_FIELDS
from scripts import cuda_resources

NAME = "cuda_emulated"
# An H100's multiprocessors.
MULTIPROCESSORS = 132
ROW_INPUTS = ("group_index", "response_mask", "response_lengths")
# Seconds a rank waits in a collective for the other before it gives up.
COLLECTIVE_TIMEOUT_S = 120


def _cpu_only(device: torch.device) -> Optional[str]:
    return None if device.type == "cpu" else f'backend="{NAME}" takes CPU tensors, got {device}'


def emulated_backend() -> backends.Backend:
    cuda = backends.backend("cuda")
    return backends.Backend(NAME, ("cpu",), _cpu_only, _ops.kernel_runner("dara_emulated"), cuda.max_rewards,
                            cuda.tolerances, kernel_checks_infinite=cuda.kernel_checks_infinite, auto=False)


def configure(multiprocessors: int = MULTIPROCESSORS, seed: int = 0) -> None:
    torch.ops.dara_emulated.configure(multiprocessors, seed)


def failures_of(result: BackendResult) -> list[str]:
    return [f"{failure.call}: {failure.problem}" for failure in result.failures]


def sweep() -> list[str]:
    """The check's sweep (python -m dara_kernels.check) at the CUDA backend's column limit and tolerances."""
    result = BackendResult(backends.backend(NAME), "cpu")
    limit = result.backend.max_rewards
    compare_backends([result], check_calls(limit, (1, limit)))
    print(f"sweep: {result.cases} calls, {result.skipped} over the column limit, worst error "
          f"{result.worst_ratio:.3g} of its tolerance ({result.worst_call})")
    return failures_of(result)


def rank_rows(call: Call) -> Optional[list[torch.Tensor]]:
    """Two ranks' rows, each holding whole groups (the first third of the groups, the rest); None for one group."""
    n = call.rewards.shape[0]
    if "group_size" in call.inputs:
        size = call.inputs["group_size"]
        groups = n // size
        cut = max(1, groups // 3) * size
        return None if groups < 2 else [torch.arange(cut), torch.arange(cut, n)]
    index = call.inputs["group_index"]
    ids = index.unique()
    if len(ids) < 2:
        return None
    cut = ids[max(1, len(ids) // 3)]
    return [torch.nonzero(index < cut).flatten(), torch.nonzero(index >= cut).flatten()]


def distributed_calls() -> list[tuple[Call, list[torch.Tensor]]]:
    """The k-range calls (every method, K up to the limit, both layouts, masks and lengths) that split."""
    limit = backends.backend(NAME).max_rewards
    split = [(call, rank_rows(call)) for call in k_range_calls(limit, (1, limit))]
    return [(call, rows) for call, rows in split if rows is not None]


def on_rank(call: Call, rows: torch.Tensor) -> Call:
    inputs = {name: value[rows] if name in ROW_INPUTS else value for name, value in call.inputs.items()}
    return dataclasses.replace(call, rewards=call.rewards[rows], inputs=inputs)


def _rank(rank: int, library: str, init_file: str, out_dir: str) -> None:
    """One rank of distributed mode: every distributed call's rows of this rank, through fused_advantage
    with process_group (the accumulate op, the all-reduces, the fused op with the batch's accumulators)."""
    torch.ops.load_library(library)
    configure(seed=rank)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    outs = []
    try:
        with backends.registered_for_tests(emulated_backend()), sweep_settings():
            for call, rows in distributed_calls():
                mine = on_rank(call, rows[rank])
                mine = dataclasses.replace(mine, options={**mine.options, "process_group": dist.group.WORLD})
                try:
                    outs.append(mine.run(NAME))
                except Exception as err:  # noqa: BLE001 - compared with the other rank's and the reference's
                    outs.append(repr(err))
    finally:
        dist.destroy_process_group()
    torch.save(outs, os.path.join(out_dir, f"rank{rank}.pt"))


def assembled(call: Call, rows: list[torch.Tensor], outs: list) -> AdvantageOutput:
    """The ranks' rows put back in place; the batch-level fields, which must be the same bits on both."""
    fields = {}
    for name, rule, _ in OUTPUT_FIELDS:
        values = [getattr(out, name) for out in outs]
        if values[0] is None or not rule.startswith("N"):
            if values[0] is not None and not torch.equal(values[0], values[1]):
                raise AssertionError(f"the ranks' {name} differ: {values[0]} and {values[1]}")
            fields[name] = values[0]
            continue
        whole = values[0].new_empty((call.rewards.shape[0], *values[0].shape[1:]))
        for r, value in zip(rows, values):
            whole[r] = value
        fields[name] = whole
    return AdvantageOutput(**fields)


def distributed(library: str) -> list[str]:
    """Distributed mode on two emulated ranks (two processes, gloo): the given-accumulator path of
    dara_kernels/distributed.py, against the reference on the whole batch."""
    result = BackendResult(backends.backend(NAME), "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(library, os.path.join(tmp, "init"), tmp), nprocs=2)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False) for r in range(2)]
    for (call, rows), *outs in zip(distributed_calls(), *ranks):
        ref = call.run("reference")
        if any(isinstance(out, str) for out in outs):
            result.record(call, 0.0, "", f"the ranks raised {outs}")
            continue
        try:
            result.record(call, *compare(assembled(call, rows, outs), ref))
        except AssertionError as err:
            result.record(call, 0.0, "", str(err))
    print(f"distributed: {result.cases} calls on two ranks, worst error {result.worst_ratio:.3g} of its tolerance")
    return failures_of(result)


# (label, multiprocessors, layout). Each launch's grid is launch.h's grid_blocks at the kernel's own resident
# blocks per SM: min(ceil(max_groups / 8), multiprocessors x blocks per SM), max_groups N for a group_index.
# On two multiprocessors the 40 groups of 10 rows take 2 accumulate blocks (1 an SM) and 4 apply blocks (2 an SM),
# so either kernel launched on the other's grid fails the scenario.
GRIDS = [
    ("one block", 1, {"rows": 64, "group_size": 8}),
    ("two and four blocks, each warp several groups", 2, {"rows": 400, "group_size": 10}),
    ("more blocks than groups", 64, {"rows": 97, "groups": 3}),
]
GRID_METHODS = ("dara", "grpo", "saw", "gd2po_hard", "rvpo")
GRID_SEEDS = (1, 2, 3)


def grid_call(layout: dict, method: str) -> Call:
    gen = torch.Generator().manual_seed(len(method))
    n = layout["rows"]
    rewards = torch.randn(n, 3, generator=gen)
    rewards[torch.rand(n, 3, generator=gen) < 0.1] = float("nan")
    mask = torch.rand(n, 24, generator=gen) < 0.7
    if "group_size" in layout:
        inputs = {"group_size": layout["group_size"]}
    else:
        inputs = {"group_index": torch.randint(0, layout["groups"], (n,), generator=gen) * 7 + 5}
    return Call(f"{n} rows", rewards, {**inputs, "response_mask": mask}, {"method": method})


def expected_grid(layout: dict, multiprocessors: int, blocks_per_multiprocessor: int) -> int:
    max_groups = layout["rows"] // layout["group_size"] if "group_size" in layout else layout["rows"]
    return max(1, min(-(-max_groups // 8), multiprocessors * blocks_per_multiprocessor))


def grids() -> list[str]:
    """One block, a grid-stride loop, more blocks than groups (blocks with no group): each method against the
    reference, each launch's grid from its own kernel's blocks per SM, and the same bits in every block order."""
    result = BackendResult(backends.backend(NAME), "cpu")
    accumulate_blocks, apply_blocks, _ = torch.ops.dara_emulated.launch_limits()
    expected = {label: [expected_grid(layout, multiprocessors, accumulate_blocks),
                        expected_grid(layout, multiprocessors, apply_blocks)]
                for label, multiprocessors, layout in GRIDS}
    failures = []
    if accumulate_blocks != apply_blocks and all(a == b for a, b in expected.values()):
        failures.append(f"no shape of GRIDS gives accumulate and apply different grids (blocks an SM: "
                        f"{accumulate_blocks}, {apply_blocks}): a kernel launched on the other's grid would pass")
    for label, multiprocessors, layout in GRIDS:
        for method in GRID_METHODS:
            call = grid_call(layout, method)
            ref = call.run("reference")
            first = None
            for seed in GRID_SEEDS:
                configure(multiprocessors, seed)
                out = call.run(NAME)
                kernels, launched, threads, _ = torch.ops.dara_emulated.launches()
                where = dataclasses.replace(call, label=f"{label}, seed {seed}")
                if kernels != ["accumulate_kernel", "apply_kernel"] or launched != expected[label] or \
                        threads != [256, 256]:
                    result.record(where, 0.0, "", f"launched {kernels} on grids {launched} of {threads} threads, "
                                  f"not on {expected[label]}")
                result.record(where, *compare(out, ref))
                first = first or out
                if not all(a is b or torch.equal(a, b) for a, b in zip(out, first)):
                    result.record(where, 0.0, "", f"other bits than in seed {GRID_SEEDS[0]}'s block order")
    configure()
    print(f"grids: {len(GRIDS)} shapes x {len(GRID_METHODS)} methods x {len(GRID_SEEDS)} block orders")
    return failures + failures_of(result)


FAULTY_SOURCE = pathlib.Path(__file__).with_name("faulty_kernels.cu")


def site(kernel: str, text: str, nth: int = 1) -> str:
    """faulty_kernels.cu:LINE: of the nth line holding `text` in `kernel`'s body."""
    lines = FAULTY_SOURCE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if f"void {kernel}(" in line)
    found = [i for i in range(start, len(lines)) if text in lines[i]]
    return f"tests/cuda_emulation/faulty_kernels.cu:{found[nth - 1] + 1}:"


# Each divergent kernel and what its error must say besides the kernel: the barrier's file:line, where the
# threads are (the warp that stops first depends on the order, so a warp's threads are not named).
DIVERGENT = {
    "exit_before_barrier": ("__syncthreads()", site("exit_before_barrier", "__syncthreads()"), "threads 32-255 exited"),
    "two_barriers": ("threads 0-127 at __syncthreads() " + site("two_barriers", "__syncthreads()"),
                     "threads 128-255 at __syncthreads() " + site("two_barriers", "__syncthreads()", 2)),
    "exit_before_shuffle": ("__shfl_down_sync " + site("exit_before_shuffle", "__shfl_down_sync"),
                            "is never reached by lane 16 of warp", "which exited"),
    "split_shuffle": ("at __shfl_sync " + site("split_shuffle", "__shfl_sync"),
                      "at __shfl_sync " + site("split_shuffle", "__shfl_sync", 2)),
}


def faults() -> list[str]:
    """Divergence is a RuntimeError naming the kernel and the barrier, not a hang; a missing barrier reads
    unwritten shared memory; a launch over its shared-memory limit fails as on a GPU, and the largest one the
    op makes stays under it."""
    failures = []
    for kernel, expected in DIVERGENT.items():
        try:
            torch.ops.dara_emulated.faulty_kernel(kernel)
            failures.append(f"{kernel} ran to its end")
        except RuntimeError as err:
            message = str(err).splitlines()[0]
            missing = [text for text in (f"kernel {kernel}, block 0 of 1", *expected) if text not in message]
            if missing:
                failures.append(f"{kernel}: the error {message!r} lacks {missing}")
    expected = torch.arange(1, 9, dtype=torch.float64).remainder(8).repeat_interleave(32)
    if not torch.equal(torch.ops.dara_emulated.faulty_kernel("neighbour_read_synced"), expected):
        failures.append("neighbour_read with its barrier read other values than the other warps wrote")
    if not torch.ops.dara_emulated.faulty_kernel("neighbour_read_unsynced").isnan().any():
        failures.append("neighbour_read without its barrier read only written values: the warps ran in order")
    try:
        torch.ops.dara_emulated.faulty_kernel("unset_shared_limit")
        failures.append("a launch with 48 KiB + 8 bytes of dynamic shared memory and no attribute ran")
    except RuntimeError as err:
        if str(err) != "invalid argument":
            failures.append(f"the launch over the shared-memory limit raised {err!r}")
    failures += largest_shared()
    print(f"faults: {len(DIVERGENT)} divergent kernels, a missing barrier, the shared-memory limit, the largest "
          "launch under it")
    return failures


def largest_shared() -> list[str]:
    """K = 16 under positive calibration takes the most shared memory a block (47,936 bytes): it runs within the
    48 KiB a launch takes with no attribute set, whatever the device's opt-in limit. The emulated device has no
    cudaFuncSetAttribute and no opt-in limit, so host code that sets the attribute does not build here. The
    launch takes exactly the bound launch.h's static_assert holds under 48 KiB, and the size the resource gate
    (scripts/cuda_resources.py) counts for the any-K kernel."""
    case = make_case(3, "shuffled", backends.backend(NAME).max_rewards, shape=(97,))
    call = Call("K=16", case.rewards, case.layout, {"method": "dara", "calibration": "positive"})
    configure()
    try:
        call.run(NAME)
    except RuntimeError as err:
        return [f"K = 16 under positive calibration raised {err!r}"]
    kernels, _, _, shared = torch.ops.dara_emulated.launches()
    _, _, bound = torch.ops.dara_emulated.launch_limits()
    launch = cuda_resources.launch_constants()
    gated = cuda_resources.accumulate_shared_bytes(wire, launch.max_rewards, launch.warps_per_block)
    taken = shared[kernels.index("accumulate_kernel")]
    if not taken == bound == gated:
        return [f"K = 16 took {taken} bytes of shared memory a block; launch.h's static_assert bounds {bound}, "
                f"the resource gate counts {gated}"]
    return []


def overflow() -> list[str]:
    """Reads past a block's dynamic shared memory: ASan must stop the process before this returns."""
    torch.ops.dara_emulated.faulty_kernel("shared_overflow")
    return ["shared_overflow read past its shared memory and the process went on"]


SCENARIOS = {"sweep": sweep, "grids": grids, "faults": faults, "overflow": overflow}


def main(scenario: str, library: str) -> int:
    torch.ops.load_library(library)
    configure()
    start = time.perf_counter()
    with backends.registered_for_tests(emulated_backend()), sweep_settings():
        failures = {**SCENARIOS, "distributed": functools.partial(distributed, library)}[scenario]()
    print(f"{scenario}: {time.perf_counter() - start:.1f} s, {len(failures)} failures")
    for failure in failures:
        print("FAILED", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
