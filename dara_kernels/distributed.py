"""Distributed mode: each rank holds whole groups; the batch statistics are
the only thing ranks exchange.

accumulate (local) -> all-reduce SUM of the accumulator vector (O(K^2)
doubles) -> the bad-input check on the summed counts -> finalize + apply
(local, with the batch's accumulators). Methods whose weights need the batch
min/max (SAW and SA-MRPO without reward_bounds) add one MAX all-reduce of 2K
doubles. All collectives are public torch.distributed calls.

Each kernel backend's record (backends.py) runs its stages around `reduce`
through one caller, _ops.kernel_runner: its library's accumulate op, reduce,
then its fused op with the reduced sums (dara:: for the CPU and CUDA
kernels, dara_triton:: for Triton).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .backends import Backend, BackendUnavailable, registered
from .options import AdvantageOptions
from .output import AdvantageOutput
from .validation import PreparedInputs
from .wire import ACCUMULATOR_SEGMENTS, METHOD_TRAITS, segment_offsets

# The bad-input counts come before every K- or C-sized segment: their offsets
# are the same for every reward and column count.
_COUNT_SLOTS = {name: segment_offsets(ACCUMULATOR_SEGMENTS, 1, 1)[name]
                for name in ("infinite_rewards", "missing_rewards", "negative_lengths")}


def needs_extrema(opts: AdvantageOptions, has_bounds: bool) -> bool:
    return METHOD_TRAITS[opts.method].raw_extremes and not has_bounds


def raise_on_bad_input(accumulators: torch.Tensor, inputs: PreparedInputs, opts: AdvantageOptions) -> None:
    """The same error on every rank, from the all-reduced counts (one host read)."""
    infinite, missing, negative = (int(v) for v in accumulators[list(_COUNT_SLOTS.values())].tolist())
    where = "across the ranks of process_group"
    if infinite:
        raise ValueError(f"rewards contain {infinite} +-Inf entries {where}; rewards must be finite or NaN")
    if missing and opts.nan_policy == "raise":
        raise ValueError(f'rewards contain {missing} NaN entries {where} and nan_policy="raise"')
    if negative:
        raise ValueError(f"response_lengths must be >= 0; {negative} are negative {where}")


def reduce_accumulators(accumulators: torch.Tensor, extrema: torch.Tensor, inputs: PreparedInputs,
                        opts: AdvantageOptions, process_group) -> tuple[torch.Tensor, torch.Tensor]:
    accumulators = accumulators.clone()
    if inputs.check_reduced and inputs.response_lengths is not None:
        # The kernels count bad rewards as they read them; the lengths are counted here.
        accumulators[_COUNT_SLOTS["negative_lengths"]] = (inputs.response_lengths < 0).sum()
    dist.all_reduce(accumulators, op=dist.ReduceOp.SUM, group=process_group)
    if needs_extrema(opts, inputs.reward_bounds is not None):
        extrema = extrema.clone()
        dist.all_reduce(extrema, op=dist.ReduceOp.MAX, group=process_group)
    if inputs.check_reduced:
        raise_on_bad_input(accumulators, inputs, opts)
    return accumulators, extrema


def distributed_advantage(record: Backend, inputs: PreparedInputs, opts: AdvantageOptions,
                          process_group) -> AdvantageOutput:
    if not record.accumulates:
        kernels = ", ".join(b.name for b in registered() if b.accumulates)
        raise BackendUnavailable(f'process_group needs a kernel backend ({kernels}), not "{record.name}": it has no '
                                 "accumulate stage to all-reduce")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("process_group was given but torch.distributed is not initialised")

    def reduce(accumulators, extrema):
        return reduce_accumulators(accumulators, extrema, inputs, opts, process_group)

    return record.run(inputs, opts, reduce)
