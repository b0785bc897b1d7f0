"""process_group mode: two gloo ranks, each holding whole groups, equal the
one-process result on the concatenated batch."""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dara_kernels as dk
from tests.cases import make_case

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")

METHODS = ["grpo", "gdpo", "dara", "dvao", "saw", "sa_mrpo", "gd2po_hard"]


def split_rows(case):
    """Rank 0 gets the groups with the smaller ids, rank 1 the rest (uneven halves)."""
    index = case.layout["group_index"]
    cut = index.unique()[len(index.unique()) // 3]
    return [torch.nonzero(index < cut).flatten(), torch.nonzero(index >= cut).flatten()]


def dara_ops_of_one_call(case, rows):
    """The compiled ops one distributed CPU call runs, by name."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        dk.fused_advantage(case.rewards[rows], group_index=case.layout["group_index"][rows], method="saw",
                           backend="cpu", process_group=dist.group.WORLD)
    return sorted(e.name for e in prof.events() if e.name.startswith("dara::"))


def worker(rank, init_file, results):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        case = make_case(7, "shuffled", 3, nan_fraction=0.1, shape=(97,))
        rows = split_rows(case)[rank]
        for method in METHODS:
            for bn in ("response", "token"):
                out = dk.fused_advantage(
                    case.rewards[rows], group_index=case.layout["group_index"][rows], method=method,
                    batch_norm=bn, response_mask=case.mask[rows], backend="cpu",
                    process_group=dist.group.WORLD)
                results[(rank, method, bn)] = {k: v for k, v in out._asdict().items() if v is not None}
        results[(rank, "dara ops")] = dara_ops_of_one_call(case, rows)
    finally:
        dist.destroy_process_group()


def test_two_ranks_equal_one_process():
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        results = manager.dict()
        mp.start_processes(worker, args=(os.path.join(tmp, "init"), results), nprocs=2,
                           start_method="spawn", join=True)
        results = dict(results)
    for rank in range(2):
        # One op, which reads the rewards twice (accumulate, apply) and
        # all-reduces in between: no separate accumulate call.
        assert results[(rank, "dara ops")] == ["dara::fused_advantage"]
    case = make_case(7, "shuffled", 3, nan_fraction=0.1, shape=(97,))
    parts = split_rows(case)
    for method in METHODS:
        for bn in ("response", "token"):
            whole = dk.fused_advantage(case.rewards, group_index=case.layout["group_index"],
                                       method=method, batch_norm=bn, response_mask=case.mask,
                                       backend="cpu")
            for rank, rows in enumerate(parts):
                got = results[(rank, method, bn)]
                for name in ("advantages", "token_advantages", "keep", "query_scale"):
                    torch.testing.assert_close(got[name], getattr(whole, name)[rows], rtol=1e-5, atol=1e-6,
                                               msg=f"{method} {bn} rank {rank} {name}")
                for name in ("density", "weights", "energy", "weighted_energy", "active_groups",
                             "num_groups", "batch_mean", "batch_std"):
                    torch.testing.assert_close(got[name], getattr(whole, name), rtol=1e-5, atol=1e-6,
                                               msg=f"{method} {bn} rank {rank} {name}")
