"""Distributed mode: each rank holds whole groups; the batch statistics are
the only thing ranks exchange.

accumulate (local) -> all-reduce SUM of the accumulator vector (O(K^2)
doubles) -> finalize + apply (local, with the global accumulators). Methods
whose weights need the batch min/max (SAW and SA-MRPO without reward_bounds)
add one MAX all-reduce of 2K doubles.

Each backend reads its rewards twice, as in one process, except CUDA:
- cpu: one op call; the kernel all-reduces between its accumulate and
  finalize through torch's functional collectives (`group_name`).
- triton: one call; the Python driver all-reduces between its launches.
- cuda: its finalize runs in accumulate's last block, so the accumulators
  come from a first op call (`dara::accumulate`) and the second call runs
  accumulate again to rebuild its per-group table: three reads of the rewards.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import _ops
from .backends import BackendUnavailable
from .options import AdvantageOptions
from .output import AdvantageOutput
from .validation import PreparedInputs


def needs_extrema(opts: AdvantageOptions, has_bounds: bool) -> bool:
    return opts.method in ("saw", "sa_mrpo") and not has_bounds


def reduce_accumulators(accumulators: torch.Tensor, extrema: torch.Tensor, process_group,
                        with_extrema: bool) -> tuple[torch.Tensor, torch.Tensor]:
    accumulators = accumulators.clone()
    dist.all_reduce(accumulators, op=dist.ReduceOp.SUM, group=process_group)
    if with_extrema:
        extrema = extrema.clone()
        dist.all_reduce(extrema, op=dist.ReduceOp.MAX, group=process_group)
    return accumulators, extrema


def distributed_advantage(backend: str, inputs: PreparedInputs, opts: AdvantageOptions,
                          process_group) -> AdvantageOutput:
    if backend not in ("cpu", "cuda", "triton"):
        raise BackendUnavailable(
            f'process_group needs a kernel backend (cpu, cuda or triton), not "{backend}": '
            "the reference has no accumulate stage to all-reduce")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("process_group was given but torch.distributed is not initialised")
    with_extrema = needs_extrema(opts, inputs.reward_bounds is not None)

    def reduce(accumulators, extrema):
        return reduce_accumulators(accumulators, extrema, process_group, with_extrema)

    if backend == "cpu":
        return _ops.kernel_fused_advantage(inputs, opts, group_name=process_group.group_name)
    if backend == "triton":
        from .triton import triton_fused_advantage

        return triton_fused_advantage(inputs, opts, reduce)
    accumulators, extrema = reduce(*_ops.kernel_accumulate(inputs, opts))
    return _ops.kernel_fused_advantage(inputs, opts, accumulators=accumulators, extrema=extrema)
