"""Distributed mode: each rank holds whole groups; the batch statistics are
the only thing ranks exchange.

accumulate (local) -> all-reduce SUM of the accumulator vector (O(K^2)
doubles) -> finalize + apply (local, with the global accumulators). Methods
whose weights need the batch min/max (SAW and SA-MRPO without reward_bounds)
add one MAX all-reduce of 2K doubles.

Cost: the compiled ops keep no state between calls, so the final call runs
its own accumulate pass again (to rebuild the per-group table) and then
finalizes with the reduced accumulators: each rank reads its rewards three
times instead of twice.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .options import AdvantageOptions


def needs_extrema(opts: AdvantageOptions, has_bounds: bool) -> bool:
    return opts.method in ("saw", "sa_mrpo") and not has_bounds


def reduce_accumulators(accumulators: torch.Tensor, extrema: torch.Tensor, process_group,
                        with_extrema: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("process_group was given but torch.distributed is not initialised")
    accumulators = accumulators.clone()
    dist.all_reduce(accumulators, op=dist.ReduceOp.SUM, group=process_group)
    if with_extrema:
        extrema = extrema.clone()
        dist.all_reduce(extrema, op=dist.ReduceOp.MAX, group=process_group)
    return accumulators, extrema
