"""process_group mode with two gloo ranks, each holding whole groups: the
result equals the one-process result on the concatenated batch, a one-rank
group gives the same bits as no group, and bad input on one rank makes every
rank raise the same error without waiting in a collective."""
import os
import pathlib
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.overrides import TorchFunctionMode

import dara_kernels as dk
from dara_kernels.check.cases import make_case

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")

METHODS = ["grpo", "gdpo", "dara", "dvao", "saw", "sa_mrpo", "gd2po_hard"]
# Bad input on rank 1 only: (label, how rank 1's rewards and response_lengths are spoilt, extra options, the
# error both ranks raise, or "no error"). Every rank passes valid lengths otherwise.
BAD_INPUTS = [
    ("inf", lambda r, n: r.index_fill_(0, torch.tensor([3]), float("inf")), {}, r"3 \+-Inf entries"),
    ("nan-raise", lambda r, n: r.index_fill_(0, torch.tensor([5]), float("nan")), {"nan_policy": "raise"},
     r"NaN entries across the ranks"),
    # Rank 0 alone sees valid lengths: only the all-reduced count can stop it before negative token weights.
    ("negative-length", lambda r, n: n.index_fill_(0, torch.tensor([2]), -1), {"batch_norm": "token"},
     r"^response_lengths must be >= 0; 1 are negative across the ranks of process_group$"),
    # validate=False reads no values, so not the reduced counts either (nor under torch.compile or graph capture).
    ("inf-unvalidated", lambda r, n: r.index_fill_(0, torch.tensor([3]), float("inf")), {"validate": False},
     r"^no error$"),
]
# A collective left waiting on a rank that raised would stop here, far past a healthy call's time.
COLLECTIVE_TIMEOUT_S = 20


def split_rows(case):
    """Rank 0 gets the groups with the smaller ids, rank 1 the rest (uneven halves)."""
    index = case.layout["group_index"]
    cut = index.unique()[len(index.unique()) // 3]
    return [torch.nonzero(index < cut).flatten(), torch.nonzero(index >= cut).flatten()]


def dara_ops_of_one_call(case, rows):
    """The compiled ops one distributed CPU call runs, by name."""
    with OpNames() as seen:
        dk.fused_advantage(case.rewards[rows], group_index=case.layout["group_index"][rows], method="saw",
                           backend="cpu", process_group=dist.group.WORLD)
    return sorted(name for name in seen.names if name.startswith("dara."))


class OpNames(TorchFunctionMode):
    """What a block calls from Python, ops by their overload's name. Not torch.profiler: a profiled distributed
    call kept the gloo group alive past destroy_process_group, so its worker threads outlived the interpreter's
    finalisation; one dropping a finished all-reduce's tensor then needed the GIL and aborted the rank ("terminate
    called without an active exception", 4 runs in 113 here, and once in CI at cfdfb45)."""

    def __enter__(self):
        self.names = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def gloo_threads() -> list[str]:
    """This process's threads that gloo runs: none once the group is destroyed, unless something still holds it."""
    names = [comm.read_text().strip() for comm in pathlib.Path("/proc/self/task").glob("*/comm")]
    return [name for name in names if "gloo" in name]


def worker(rank, init_file, results):
    import datetime

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
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
        for label, spoil, options, _ in BAD_INPUTS:
            rewards, lengths = case.rewards[rows].clone(), case.lengths[rows].clone()
            if rank == 1:
                spoil(rewards, lengths)
            try:
                dk.fused_advantage(rewards, group_index=case.layout["group_index"][rows], response_lengths=lengths,
                                   backend="cpu", process_group=dist.group.WORLD, **options)
                results[(rank, label)] = "no error"
            except ValueError as err:
                results[(rank, label)] = str(err)
    finally:
        dist.destroy_process_group()
    results[(rank, "gloo threads left")] = gloo_threads()


def one_rank_worker(rank, init_file, results):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=1)
    try:
        case = make_case(4, "shuffled", 4, nan_fraction=0.1, shape=(97,))
        for method in METHODS:
            kwargs = dict(group_index=case.layout["group_index"], method=method, response_mask=case.mask,
                          batch_norm="token", backend="cpu")
            alone = dk.fused_advantage(case.rewards, **kwargs)
            grouped = dk.fused_advantage(case.rewards, process_group=dist.group.WORLD, **kwargs)
            results[method] = all(torch.equal(a, b) for a, b in zip(alone, grouped) if a is not None)
    finally:
        dist.destroy_process_group()


def spawn(fn, nprocs):
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        results = manager.dict()
        mp.start_processes(fn, args=(os.path.join(tmp, "init"), results), nprocs=nprocs, start_method="spawn",
                           join=True)
        return dict(results)


@pytest.fixture(scope="module")
def two_ranks():
    return spawn(worker, 2)


def test_two_ranks_equal_one_process(two_ranks):
    for rank in range(2):
        # The accumulate op, the all-reduce in Python, then the op with the batch's accumulators.
        assert two_ranks[(rank, "dara ops")] == ["dara.accumulate.default", "dara.fused_advantage.default"]
        # Nothing of a call holds the process group: destroying it stops its threads before the rank exits.
        assert two_ranks[(rank, "gloo threads left")] == []
    case = make_case(7, "shuffled", 3, nan_fraction=0.1, shape=(97,))
    parts = split_rows(case)
    for method in METHODS:
        for bn in ("response", "token"):
            whole = dk.fused_advantage(case.rewards, group_index=case.layout["group_index"],
                                       method=method, batch_norm=bn, response_mask=case.mask,
                                       backend="cpu")
            for rank, rows in enumerate(parts):
                got = two_ranks[(rank, method, bn)]
                for name in ("advantages", "token_advantages", "keep", "query_scale", "informative", "sum_informative"):
                    torch.testing.assert_close(got[name], getattr(whole, name)[rows], rtol=1e-5, atol=1e-6,
                                               msg=f"{method} {bn} rank {rank} {name}")
                for name in ("density", "weights", "energy", "weighted_energy", "active_groups",
                             "num_groups", "batch_mean", "batch_std", "informative_groups", "sum_informative_groups",
                             "conflict_groups"):
                    torch.testing.assert_close(got[name], getattr(whole, name), rtol=1e-5, atol=1e-6,
                                               msg=f"{method} {bn} rank {rank} {name}")
                    # Every rank holds the same batch statistics, bit for bit.
                    assert torch.equal(got[name], two_ranks[(0, method, bn)][name]), (method, bn, name)


@pytest.mark.parametrize("label,needle", [(b[0], b[3]) for b in BAD_INPUTS])
def test_bad_input_on_one_rank_raises_on_every_rank(two_ranks, label, needle):
    """Both ranks raise the same error; neither waited out the collective's timeout (the module would
    have failed with a gloo timeout instead)."""
    import re

    errors = [two_ranks[(rank, label)] for rank in range(2)]
    assert errors[0] == errors[1], errors
    assert re.search(needle, errors[0]), errors[0]


def test_one_rank_group_gives_the_same_bits_as_none():
    assert all(spawn(one_rank_worker, 1).values())
