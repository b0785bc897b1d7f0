"""The Triton backend: accumulate -> (all-reduce) -> finalize -> apply, three
launches, no host synchronisation (group counts stay on the device)."""
from __future__ import annotations

import os

import torch
import triton

from .._ops import accumulator_sizes
from ..options import BATCH_NORM_CODE, METHOD_CODE, AdvantageOptions
from ..output import AdvantageOutput
from ..validation import PreparedInputs
from .accumulate import accumulate_kernel
from .apply import apply_kernel
from .finalize import finalize_kernel
from .layout import DeviceLayout, device_layout

BLOCK_R = 16
BLOCK_T = 64


def _programs(layout: DeviceLayout, device: torch.device) -> int:
    if device.type == "cuda":
        target = torch.cuda.get_device_properties(device).multi_processor_count * 8
    else:
        target = 2  # the interpreter runs programs one after another
    return max(1, min(target, layout.max_groups))


def _block_k(k: int) -> int:
    return max(2, triton.next_power_of_2(k))


def _token_weights(inputs: PreparedInputs, opts: AdvantageOptions):
    if opts.batch_norm != "token":
        return None
    if inputs.response_mask is not None:
        return inputs.response_mask.sum(1, dtype=torch.float64)
    return inputs.response_lengths


def _flags(opts: AdvantageOptions, inputs: PreparedInputs) -> dict:
    return dict(
        COMBINED=opts.method == "grpo", GROUP_WEIGHTED=opts.method == "dvao",
        DROPS=opts.method == "gd2po_hard", NAN_TO_ZERO=opts.nan_policy == "zero",
        HAS_INDEX=inputs.group_index is not None,
    )


def _run_accumulate(inputs: PreparedInputs, opts: AdvantageOptions):
    rewards = inputs.rewards
    n, k = rewards.shape
    device = rewards.device
    layout = device_layout(rewards, inputs.group_size, inputs.group_index)
    programs = _programs(layout, device)
    m, e = accumulator_sizes(k, opts.method == "grpo")
    groups = max(layout.max_groups, 1)
    f32 = dict(dtype=torch.float32, device=device)
    table = dict(
        mean=torch.empty(groups * k, **f32), scale=torch.empty(groups * k, **f32),
        weight=torch.empty(groups * k if opts.method == "dvao" else 1, **f32),
        sum_stats=torch.empty(2 * groups if opts.method == "grpo" else 2, **f32),
        kappa=torch.empty(groups, **f32),
    )
    partial = torch.empty(programs, m, dtype=torch.float64, device=device)
    extrema = torch.empty(programs, e, dtype=torch.float64, device=device)
    token = _token_weights(inputs, opts)
    dummy = layout.num_groups
    accumulate_kernel[(programs,)](
        rewards, layout.rows if layout.rows is not None else dummy,
        layout.offsets if layout.offsets is not None else dummy, layout.num_groups,
        inputs.reward_weights, token if token is not None else dummy,
        table["mean"], table["scale"], table["weight"], table["sum_stats"], table["kappa"], partial, extrema,
        k, layout.group_size, m, opts.eps, opts.active_tol,
        HAS_TOKEN=token is not None, RAW=opts.method in ("saw", "sa_mrpo"), UNBIASED=opts.unbiased,
        SCALE_BY_STD=opts.scale_by_std, SINGLETON_VERL=opts.singleton == "verl",
        BLOCK_R=BLOCK_R, BLOCK_K=_block_k(k), **_flags(opts, inputs),
    )
    return layout, table, partial, extrema


def accumulate_triton(inputs: PreparedInputs, opts: AdvantageOptions):
    _, _, partial, extrema = _run_accumulate(inputs, opts)
    return partial.sum(0), extrema.amax(0)


def fused_advantage_triton(inputs: PreparedInputs, opts: AdvantageOptions,
                           accumulators=None, extrema=None) -> AdvantageOutput:
    rewards = inputs.rewards
    n, k = rewards.shape
    device = rewards.device
    layout, table, partial, local_extrema = _run_accumulate(inputs, opts)
    if accumulators is not None:
        partial, local_extrema = accumulators.view(1, -1), extrema.view(1, -1)
    c = 1 if opts.method == "grpo" else k
    f32 = dict(dtype=torch.float32, device=device)
    density, weights = torch.empty(k, **f32), torch.empty(k, **f32)
    energy, weighted_energy = torch.empty(k, **f32), torch.empty(k, **f32)
    active = torch.empty(k, dtype=torch.int64, device=device)
    num_groups = torch.empty((), dtype=torch.int64, device=device)
    batch_mean, batch_std = torch.empty((), **f32), torch.empty((), **f32)
    affine = torch.empty(c + 2, dtype=torch.float64, device=device)
    bounds = inputs.reward_bounds
    finalize_kernel[(1,)](
        partial, local_extrema, partial.shape[0], partial.shape[1], k, inputs.reward_weights,
        bounds if bounds is not None else affine,
        density, weights, energy, weighted_energy, active, num_groups, batch_mean, batch_std, affine,
        opts.alpha, opts.density_floor, opts.saw_delta, opts.sa_gamma, opts.bn_eps,
        METHOD=METHOD_CODE[opts.method], BATCH_NORM=BATCH_NORM_CODE[opts.batch_norm],
        HAS_BOUNDS=bounds is not None, BLOCK_K=_block_k(k),
    )

    advantages = torch.empty(n, **f32)
    keep = torch.empty(n, dtype=torch.bool, device=device)
    query_scale = torch.empty(n, **f32)
    mask = inputs.response_mask
    t = mask.shape[1] if mask is not None else 0
    token_advantages = torch.empty((n, t), **f32) if mask is not None else None
    dummy = layout.num_groups
    apply_kernel[(_programs(layout, device),)](
        rewards, layout.rows if layout.rows is not None else dummy,
        layout.offsets if layout.offsets is not None else dummy, layout.num_groups, inputs.reward_weights,
        table["mean"], table["scale"], table["weight"], table["sum_stats"], table["kappa"], affine,
        mask if mask is not None else dummy, advantages, keep, query_scale,
        token_advantages if token_advantages is not None else dummy,
        k, c, t, layout.group_size,
        HAS_MASK=mask is not None, QUERY_SCALE=opts.apply_query_scale,
        BLOCK_R=BLOCK_R, BLOCK_K=_block_k(k), BLOCK_T=BLOCK_T, **_flags(opts, inputs),
    )
    return AdvantageOutput(advantages, token_advantages, density, weights, energy, weighted_energy,
                           active, num_groups, batch_mean, batch_std, keep, query_scale)
