"""Distributed mode: each rank holds whole groups; the batch statistics are
the only thing ranks exchange.

accumulate (local) -> all-reduce SUM of the accumulator vector (O(K^2)
doubles) -> the bad-input check on the summed counts -> finalize + apply
(local, with the batch's accumulators). Methods whose weights need the batch
min/max (SAW and SA-MRPO without reward_bounds) add one MAX all-reduce of 2K
doubles. All collectives are public torch.distributed calls.

- cpu and cuda: the accumulate op, the all-reduce, then the fused op with the
  batch's accumulators; the fused op runs accumulate again for its per-group
  table, so each rank reads its rewards three times.
- triton: one driver call that all-reduces between its launches (two reads).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import _ops
from .backends import BackendUnavailable
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


def distributed_advantage(backend: str, inputs: PreparedInputs, opts: AdvantageOptions,
                          process_group) -> AdvantageOutput:
    if backend not in ("cpu", "cuda", "triton"):
        raise BackendUnavailable(
            f'process_group needs a kernel backend (cpu, cuda or triton), not "{backend}": '
            "the reference has no accumulate stage to all-reduce")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("process_group was given but torch.distributed is not initialised")

    def reduce(accumulators, extrema):
        return reduce_accumulators(accumulators, extrema, inputs, opts, process_group)

    if backend == "triton":
        from .triton import triton_fused_advantage

        return triton_fused_advantage(inputs, opts, reduce)
    accumulators, extrema = reduce(*_ops.kernel_accumulate(inputs, opts))
    return _ops.kernel_fused_advantage(inputs, opts, accumulators=accumulators, extrema=extrema)
