"""The Triton backend: accumulate -> (all-reduce) -> finalize -> apply, three
launches, no host synchronisation (group counts stay on the device).

Every launch goes through a `Launcher`, so scripts/check_triton_compiles.py
can record exactly the kernels, argument types and constexprs the op would
launch (on meta tensors) and compile them ahead of time for a GPU target."""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional

import torch
import triton
import triton.language as tl

from ..allocation import empty_group_table, empty_outputs
from ..options import AdvantageOptions
from ..output import AdvantageOutput
from ..validation import PreparedInputs
from ..wire import SIGNAL_COUNTS, accumulator_sizes, kernel_columns
from .accumulate import accumulate_kernel
from .apply import apply_kernel
from .finalize import finalize_kernel
from .generated_tables import GroupTable, kernel_options
from .layout import DeviceLayout, device_layout

PROGRAMS_PER_SM = 8
# Registers a thread may use, given to ptxas (maxnreg) so that eight programs
# of 2 warps stay resident per SM (65,536 registers). Without a cap ptxas aimed
# at occupancy steps of its own and spilled a few bytes in some variants to
# reach them; with it, a variant that needs more spills, and
# scripts/check_triton_compiles.py fails on any spill. Apply runs 2 warps like
# accumulate: its tiles hold 16 to 64 values below 64 lanes (128 at 64), so
# 4 warps' 128 threads mostly held copies, and at 4 warps' 64 registers
# reading the gate from the tile spilled 8 bytes (4 lanes, sm_90).
ACCUMULATE_REGISTERS = 128
APPLY_WARPS = 2
APPLY_REGISTERS = 128
# Finalize is one program: 8 warps spread its [lanes, lanes] matrices so
# that no variant spills.
FINALIZE_WARPS = 8
# Rows per tile: the accumulate tile keeps a [rows, lanes, lanes] outer
# product live, so rows shrink as the lanes grow to hold it near 128 values
# (at 256, Triton 3.6, the GPU machine's, spilled 24-124 bytes in the 4-lane
# accumulate on sm_90; 3.9 did not).
TILE_VALUES = 128
MAX_BLOCK_R = 16
# The interpreter runs programs one after another; two still exercise the
# cross-program reduction.
INTERPRETER_PROGRAMS = 2

Launcher = Callable[..., None]
Reduce = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def launch(kernel, grid, *args, **constexprs) -> None:
    kernel[grid](*args, **constexprs)


def _programs(layout: DeviceLayout, device: torch.device) -> int:
    if device.type == "cuda":
        target = torch.cuda.get_device_properties(device).multi_processor_count * PROGRAMS_PER_SM
    else:
        target = INTERPRETER_PROGRAMS
    return max(1, min(target, layout.max_groups))


def block_k(lanes: int) -> int:
    return max(2, triton.next_power_of_2(lanes))


# Accumulate's warps per program follow its tile: its loop-carried batch
# sums are replicated per thread, so small tiles take few warps; blocks of 16
# lanes (K > 8, or K = 8 under positive calibration) take 8 warps and blocks
# of 32 take 16 to spread their [lanes, lanes] double sums within the
# register cap (at 8 warps the float64-reward variant spilled 32 bytes).
def accumulate_warps(lanes: int) -> int:
    return {2: 1, 4: 2, 8: 2, 16: 8}.get(block_k(lanes), 16)


def block_r(lanes: int) -> int:
    return max(2, min(MAX_BLOCK_R, TILE_VALUES // block_k(lanes) ** 2))


def _token_weights(inputs: PreparedInputs):
    if not inputs.token_weighted:
        return None
    if inputs.response_mask is not None:
        return inputs.response_mask.sum(1, dtype=torch.float64)
    return inputs.response_lengths


@functools.lru_cache(maxsize=None)
def _runtime_parameters(kernel) -> tuple[str, ...]:
    parameters = inspect.signature(kernel.fn).parameters.values()
    return tuple(p.name for p in parameters if p.annotation is not tl.constexpr)


def bind(kernel, values: dict) -> list:
    """The kernel's runtime arguments (all but its constexprs), in its parameter order, by name: the
    options (`opts`, one argument, generated_tables.KernelOptions, whose fields the kernels read by name), the
    group table (generated_tables.GroupTable), each output as `<field>_ptr`, and the layout and sizes."""
    return [values[name] for name in _runtime_parameters(kernel)]


def _blocks(lanes: int) -> dict:
    return dict(BLOCK_R=block_r(lanes), BLOCK_K=block_k(lanes))


def _run_accumulate(inputs: PreparedInputs, opts: AdvantageOptions, values: dict, run: Launcher):
    rewards = inputs.rewards
    k, c = values["K"], values["C"]
    device = rewards.device
    layout = device_layout(rewards, inputs.group_size, inputs.group_index)
    programs = _programs(layout, device)
    m, e = accumulator_sizes(k, c)
    table = GroupTable(**empty_group_table(max(layout.max_groups, 1), k, opts.method, device))
    partial = torch.empty(programs, m, dtype=torch.float64, device=device)
    extrema = torch.empty(programs, e, dtype=torch.float64, device=device)
    token = _token_weights(inputs)
    unused = layout.num_groups
    # An unused pointer of the token weights' own dtype: one kernel variant either way. Flags go as floats, as
    # the options do (scripts/generate_wire.py): an int 1 would specialise, a bool breaks older interpreters.
    no_token = torch.empty(0, dtype=torch.float64, device=device)
    values.update(
        rewards_ptr=rewards, rows_ptr=layout.rows if layout.rows is not None else unused,
        offsets_ptr=layout.offsets if layout.offsets is not None else unused, group_count_ptr=layout.num_groups,
        base_ptr=inputs.reward_weights, token_ptr=token if token is not None else no_token, table=table,
        partial_ptr=partial, extrema_ptr=extrema, group_size=layout.group_size,
        has_token=float(token is not None))
    run(accumulate_kernel, (programs,), *bind(accumulate_kernel, values),
        HAS_INDEX=inputs.group_index is not None, **_blocks(values["lanes"]),
        num_warps=accumulate_warps(values["lanes"]), maxnreg=ACCUMULATE_REGISTERS)
    return layout, partial, extrema


def fused_advantage_triton(inputs: PreparedInputs, opts: AdvantageOptions, reduce: Optional[Reduce] = None,
                           run: Launcher = launch) -> AdvantageOutput:
    """reduce(accumulators, extrema) -> (accumulators, extrema), given in
    distributed mode, combines this rank's sums with the other ranks' between
    accumulate and finalize."""
    rewards = inputs.rewards
    n, k = rewards.shape
    device = rewards.device
    c, lanes = kernel_columns(opts, k)
    mask = inputs.response_mask
    outputs = empty_outputs(n, k, mask.shape[1] if mask is not None else None, device)
    # "opts", never "options": Triton's launch binder is def dynamic_func(<kernel parameters>, **options).
    values = {"K": k, "C": c, "lanes": lanes, "opts": kernel_options(opts.kernel_vectors[0]),
              **{f"{name}_ptr": tensor for name, tensor in outputs.items()},
              "signal_counts": tuple(outputs[name] for name in SIGNAL_COUNTS)}
    layout, partial, local_extrema = _run_accumulate(inputs, opts, values, run)
    if reduce is not None:
        accumulators, extrema = reduce(partial.sum(0), local_extrema.amax(0))
        m, e = accumulator_sizes(k, c)
        if accumulators.numel() != m or extrema.numel() != e:
            raise ValueError(f"reduce must return accumulators of {m} elements and extrema of {e} for K={k} "
                             f"rewards and C={c} combined columns; got {accumulators.numel()} and {extrema.numel()}")
        partial, local_extrema = accumulators.view(1, -1), extrema.view(1, -1)
    affine = torch.empty(c + 2, dtype=torch.float64, device=device)
    bounds = inputs.reward_bounds
    values.update(partial_ptr=partial, extrema_ptr=local_extrema, programs=partial.shape[0],
                  bounds_ptr=bounds if bounds is not None else affine, affine_ptr=affine,
                  has_bounds=float(bounds is not None))
    run(finalize_kernel, (1,), *bind(finalize_kernel, values), BLOCK_K=block_k(lanes), num_warps=FINALIZE_WARPS)
    run(apply_kernel, (_programs(layout, device),), *bind(apply_kernel, values),
        HAS_INDEX=inputs.group_index is not None, **_blocks(lanes), num_warps=APPLY_WARPS, maxnreg=APPLY_REGISTERS)
    if mask is not None:
        torch.mul(outputs["advantages"].unsqueeze(1), mask, out=outputs["token_advantages"])
    else:
        outputs["token_advantages"] = None
    return AdvantageOutput(**outputs)
