"""The Triton backend's driver: accumulate -> finalize -> apply, three
launches, no host synchronisation (group counts stay on the device or are
kernel arguments). It implements the ops of triton/library.py, the schemas
of dara::fused_advantage and dara::accumulate: distributed mode calls
accumulate, all-reduces, then fused_advantage with the batch's sums.

Every launch goes through a `Launcher`, so scripts/check_triton_compiles.py
can record exactly the kernels, argument types and constexprs the op would
launch (on meta tensors) and compile them ahead of time for a GPU target."""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Callable, Optional

import torch
import triton
import triton.language as tl

from ..allocation import empty_group_table, empty_outputs
from ..wire import BATCH_NORM_CODE, METHODS, SIGNAL_COUNTS, accumulator_sizes, vector_columns, vector_field
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


def _token_weights(response_mask, response_lengths, options) -> Optional[torch.Tensor]:
    if vector_field(options, "batch_norm") != BATCH_NORM_CODE["token"]:
        return None
    if response_mask is not None:
        return response_mask.sum(1, dtype=torch.float64)
    return response_lengths


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


def _on_device(device: torch.device):
    """Triton launches on the current CUDA device: the inputs' must be current (as the CUDA binding's guard)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _run_accumulate(rewards, group_index, group_size, reward_weights, token, options, values: dict,
                    run: Launcher) -> tuple[DeviceLayout, torch.Tensor, torch.Tensor]:
    k, c = values["K"], values["C"]
    device = rewards.device
    layout = device_layout(rewards, group_size, group_index)
    programs = _programs(layout, device)
    m, e = accumulator_sizes(k, c)
    method = METHODS[int(vector_field(options, "method"))]
    table = GroupTable(**empty_group_table(max(layout.max_groups, 1), k, method, device))
    partial = torch.empty(programs, m, dtype=torch.float64, device=device)
    extrema = torch.empty(programs, e, dtype=torch.float64, device=device)
    # A pointer the kernel does not read in this layout: an int64 tensor allocated anyway (finalize writes it),
    # so that rows, offsets and the group count keep one type and the variants stay as many.
    unused = values["num_groups_ptr"]
    # An unused pointer of the token weights' own dtype: one kernel variant either way. Flags go as floats, as
    # the options do (scripts/generate_wire.py): an int 1 would specialise, a bool breaks older interpreters.
    no_token = torch.empty(0, dtype=torch.float64, device=device)
    values.update(
        rewards_ptr=rewards, rows_ptr=layout.rows if layout.rows is not None else unused,
        offsets_ptr=layout.offsets if layout.offsets is not None else unused,
        group_count_ptr=layout.num_groups if layout.num_groups is not None else unused,
        contiguous_groups=layout.max_groups, base_ptr=reward_weights,
        token_ptr=token if token is not None else no_token, table=table, partial_ptr=partial, extrema_ptr=extrema,
        group_size=layout.group_size, has_token=float(token is not None))
    run(accumulate_kernel, (programs,), *bind(accumulate_kernel, values),
        HAS_INDEX=group_index is not None, **_blocks(values["lanes"]),
        num_warps=accumulate_warps(values["lanes"]), maxnreg=ACCUMULATE_REGISTERS)
    return layout, partial, extrema


def _call_values(rewards, options, mask) -> tuple[dict, dict]:
    """(outputs, values): the call's outputs by name, and the kernels' arguments by name so far."""
    n, k = rewards.shape
    c = vector_columns(options, k)
    outputs = empty_outputs(n, k, mask.shape[1] if mask is not None else None, rewards.device)
    # "opts", never "options": Triton's launch binder is def dynamic_func(<kernel parameters>, **options).
    values = {"K": k, "C": c, "lanes": max(k, c), "opts": kernel_options(options),
              **{f"{name}_ptr": tensor for name, tensor in outputs.items()},
              "signal_counts": tuple(outputs[name] for name in SIGNAL_COUNTS)}
    return outputs, values


def accumulate(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, options,
               run: Launcher = launch) -> tuple[torch.Tensor, torch.Tensor]:
    """dara_triton::accumulate: this rank's batch accumulators and extrema (distributed mode)."""
    _, values = _call_values(rewards, options, None)
    with _on_device(rewards.device):
        _, partial, extrema = _run_accumulate(rewards, group_index, group_size, reward_weights,
                                              _token_weights(response_mask, response_lengths, options), options,
                                              values, run)
        return partial.sum(0), extrema.amax(0)


def fused_advantage(rewards, group_index, group_size, reward_weights, response_mask, response_lengths,
                    reward_bounds, accumulators, extrema, options, run: Launcher = launch) -> tuple:
    """dara_triton::fused_advantage: the outputs in wire.OUTPUT_FIELDS order. Given accumulators and extrema
    (distributed mode: every rank's, all-reduced) replace this call's own in finalize."""
    device = rewards.device
    outputs, values = _call_values(rewards, options, response_mask)
    k, c = values["K"], values["C"]
    with _on_device(device):
        layout, partial, local_extrema = _run_accumulate(
            rewards, group_index, group_size, reward_weights,
            _token_weights(response_mask, response_lengths, options), options, values, run)
        if accumulators is not None:
            m, e = accumulator_sizes(k, c)
            if accumulators.numel() != m or extrema is None or extrema.numel() != e:
                raise ValueError(f"accumulators must have {m} elements and extrema {e} for K={k} rewards and "
                                 f"C={c} combined columns; got {accumulators.numel()} and "
                                 f"{None if extrema is None else extrema.numel()}")
            partial, local_extrema = accumulators.view(1, -1), extrema.view(1, -1)
        affine = torch.empty(c + 2, dtype=torch.float64, device=device)
        values.update(partial_ptr=partial, extrema_ptr=local_extrema, programs=partial.shape[0],
                      bounds_ptr=reward_bounds if reward_bounds is not None else affine, affine_ptr=affine,
                      has_bounds=float(reward_bounds is not None))
        run(finalize_kernel, (1,), *bind(finalize_kernel, values), BLOCK_K=block_k(values["lanes"]),
            num_warps=FINALIZE_WARPS)
        run(apply_kernel, (_programs(layout, device),), *bind(apply_kernel, values),
            HAS_INDEX=group_index is not None, **_blocks(values["lanes"]), num_warps=APPLY_WARPS,
            maxnreg=APPLY_REGISTERS)
        if response_mask is not None:
            torch.mul(outputs["advantages"].unsqueeze(1), response_mask, out=outputs["token_advantages"])
    return tuple(outputs.values())
