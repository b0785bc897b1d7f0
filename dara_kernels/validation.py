"""Input checks for `fused_advantage` (docs/spec.md#inputs, #missing-values).

Every failure names the argument and what was expected. Checks that read
tensor values (NaN/Inf, negative lengths, finite weights and bounds)
synchronise with the device, so they step aside by themselves while
torch.compile traces or a CUDA graph captures; `validate=False` skips them
always. Shape, dtype and option checks always run.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Optional

import torch

from .option_checks import check_against_k
from .wire import OPTION_KINDS, OPTIONS

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INDEX_DTYPES = (torch.int32, torch.int64)
# The options checked against K, and how their values relate to the reward columns (wire.OptionKind.columns).
_COLUMN_KINDS = {o.name: OPTION_KINDS[o.kind].columns for o in OPTIONS if OPTION_KINDS[o.kind].columns}


class PreparedInputs(NamedTuple):
    """Immutable, and a tuple rather than a frozen dataclass: a small batch's
    whole call is tens of microseconds, and a frozen dataclass takes two of
    them to build."""

    rewards: torch.Tensor                     # [N, K], caller's dtype, contiguous
    group_size: int                           # 0 when group_index is used
    group_index: Optional[torch.Tensor]       # [N] int64 or None
    reward_weights: torch.Tensor              # [K] float64
    response_mask: Optional[torch.Tensor]     # [N, T] contiguous
    response_lengths: Optional[torch.Tensor]  # [N] float64
    reward_bounds: Optional[torch.Tensor]     # [K, 2] float64
    kernel_rejects_inf: bool = False          # the CPU kernel checks for +-Inf in its own pass
    check_reduced: bool = False               # distributed: the all-reduced accumulators' counts are checked
    token_weighted: bool = False              # batch_norm="token": the kernels take the token weights L_j

    @property
    def num_rows(self) -> int:
        return self.rewards.shape[0]

    @property
    def num_rewards(self) -> int:
        return self.rewards.shape[1]


def _check_tensor(name: str, value, device: torch.device) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.device != device:
        raise ValueError(f"{name} is on {value.device} but rewards are on {device}; "
                         "put every input on one device")
    return value


def _finite_or_raise(name: str, values: torch.Tensor) -> None:
    # A finite nansum proves there is no Inf at the cost of one reduction that
    # allocates nothing; only a non-finite sum (an Inf, or an overflow) pays
    # for the exact check.
    if math.isfinite(torch.nansum(values).item()) or not torch.isinf(values).any():
        return
    row = torch.nonzero(torch.isinf(values))[0].tolist()
    raise ValueError(f"{name} contains +-Inf at index {tuple(row)}; rewards must be finite or NaN")


def value_checks_possible(device: torch.device, compiling: bool) -> bool:
    """False while torch.compile traces (no values exist) or a CUDA graph
    captures (a host read would break the capture)."""
    return not compiling and not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def reward_matrix(rewards) -> torch.Tensor:
    """rewards as a contiguous [N, K] float tensor (bool and integer rewards cast once)."""
    if not isinstance(rewards, torch.Tensor):
        raise TypeError(f"rewards must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dtype not in FLOAT_DTYPES:
        if rewards.is_floating_point() or rewards.is_complex():
            raise TypeError(f"rewards must be bool, integer, float32, float16, bfloat16 or float64, "
                            f"got {rewards.dtype}")
        # Bool and integer rewards (reward functions' pass/fail and counts) are cast once.
        rewards = rewards.to(torch.float32)
    if rewards.dim() == 1:
        rewards = rewards.unsqueeze(1)
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [N, K] or [N], got shape {tuple(rewards.shape)}")
    if rewards.shape[1] == 0:
        raise ValueError("rewards must have at least one reward column (K >= 1)")
    return rewards.contiguous()


def prepare_inputs(
    rewards,
    *,
    group_size: Optional[int],
    group_index,
    reward_weights,
    response_mask,
    response_lengths,
    reward_bounds,
    nan_policy: str,
    batch_norm: str,
    validate: bool,
    kernel_checks_infinite: bool = False,
    distributed: bool = False,
    **column_options,
) -> PreparedInputs:
    """Every input checked and in the form the backends take, one step per
    input: check_reward_columns, group_layout, weights, bounds, token_inputs,
    check_reward_values (each names what it checks).

    column_options: the resolved options whose kind names or indexes the reward
    columns (wire.OptionKind.columns: reward_names, reward_gates), checked
    against K. Who checks the rewards for +-Inf (and NaN under
    nan_policy="raise") and the lengths for negatives: this function, except
    that a backend whose kernel finds +-Inf in its own pass
    (`kernel_checks_infinite`, the CPU kernel) is left that check unless
    nan_policy="raise" reads the rewards here anyway; and `distributed`: none
    here, every rank's kernel counts them into the accumulators and after the
    all-reduce every rank raises the same error, so none waits in a collective
    for a rank that raised alone."""
    rewards = reward_matrix(rewards)
    n, k = rewards.shape
    device = rewards.device
    compiling = torch.compiler.is_compiling()
    check_reward_columns(k, column_options)
    read_values = validate and value_checks_possible(device, compiling)
    group_size, group_index = group_layout(n, group_size, group_index, device)
    weights = reward_weight_vector(reward_weights, k, device, read_values)
    bounds = bounds_table(reward_bounds, k, device, read_values)
    here = read_values and not distributed
    mask, lengths = token_inputs(response_mask, response_lengths, batch_norm, n, device, here)
    if here and n:
        check_reward_values(rewards, nan_policy, infinite=not kernel_checks_infinite or nan_policy == "raise")
    return PreparedInputs(rewards, group_size or 0, group_index, weights, mask, lengths, bounds,
                          here and kernel_checks_infinite, read_values and distributed, batch_norm == "token")


def check_reward_columns(k: int, column_options: Mapping[str, Any]) -> None:
    """Each option whose kind names the reward columns has K names, and each whose kind indexes them
    (by now resolved to column indices) indexes one below K (wire.OPTION_KINDS)."""
    for name in column_options:
        if name not in _COLUMN_KINDS:
            raise TypeError(f"prepare_inputs() got an unexpected keyword argument {name!r}")
    for name, columns in _COLUMN_KINDS.items():
        if column_options.get(name) is not None:
            check_against_k(name, columns, column_options[name], k)


def group_layout(n: int, group_size: Optional[int], group_index, device: torch.device):
    """Exactly one of group_size (an int >= 1 that divides N) and group_index (an int32 or int64 [N] tensor on
    the rewards' device, returned as contiguous int64)."""
    if (group_size is None) == (group_index is None):
        raise ValueError("pass exactly one of group_size or group_index")
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, int):
            raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if n % group_size:
            raise ValueError(f"group_size={group_size} does not divide the number of rows N={n}")
        return group_size, None
    group_index = _check_tensor("group_index", group_index, device)
    if group_index.dtype not in INDEX_DTYPES:
        raise TypeError(f"group_index must be int32 or int64, got {group_index.dtype}")
    if group_index.shape != (n,):
        raise ValueError(f"group_index must have shape [N]=[{n}], got {tuple(group_index.shape)}")
    return None, group_index.to(torch.int64).contiguous()


def reward_weight_vector(reward_weights, k: int, device: torch.device, read_values: bool) -> torch.Tensor:
    """reward_weights as a contiguous float64 [K] (ones when not given), finite where values can be read."""
    if reward_weights is None:
        # Made afresh each call: a tensor kept between calls would belong to the first call's fake mode when
        # torch.export or a second compile traces another.
        weights = torch.ones(k, dtype=torch.float64, device=device)
    else:
        weights = torch.as_tensor(reward_weights, dtype=torch.float64, device=device)
        if weights.shape != (k,):
            raise ValueError(f"reward_weights must have shape [K]=[{k}], got {tuple(weights.shape)}")
        if read_values and not torch.isfinite(weights).all():
            raise ValueError("reward_weights must be finite")
    return weights.contiguous()


def bounds_table(reward_bounds, k: int, device: torch.device, read_values: bool) -> Optional[torch.Tensor]:
    """reward_bounds as a contiguous float64 [K, 2] of (lo, hi), finite with lo <= hi where values can be
    read; None when not given."""
    if reward_bounds is None:
        return None
    bounds = torch.as_tensor(reward_bounds, dtype=torch.float64, device=device)
    if bounds.shape != (k, 2):
        raise ValueError(f"reward_bounds must have shape [K, 2]=[{k}, 2] of (lo, hi), "
                         f"got {tuple(bounds.shape)}")
    if read_values and (not torch.isfinite(bounds).all() or (bounds[:, 0] > bounds[:, 1]).any()):
        raise ValueError("reward_bounds must be finite with lo <= hi in every row")
    return bounds.contiguous()


def token_inputs(response_mask, response_lengths, batch_norm: str, n: int, device: torch.device,
                 check_lengths: bool):
    """(mask, lengths): at most one of response_mask ([N, T], not complex, contiguous) and response_lengths
    ([N] integer or floating, as float64; none negative when check_lengths), and one of them under
    batch_norm="token"."""
    if response_mask is not None and response_lengths is not None:
        raise ValueError("pass response_mask or response_lengths, not both "
                         "(token weights are the mask's row sums)")
    mask = None
    if response_mask is not None:
        mask = _check_tensor("response_mask", response_mask, device)
        if mask.dim() != 2 or mask.shape[0] != n:
            raise ValueError(f"response_mask must have shape [N, T] with N={n}, got {tuple(mask.shape)}")
        if mask.is_complex():
            raise TypeError(f"response_mask must be bool, integer or floating, got {mask.dtype}")
        mask = mask.contiguous()
    lengths = None
    if response_lengths is not None:
        lengths = _check_tensor("response_lengths", response_lengths, device)
        if lengths.shape != (n,):
            raise ValueError(f"response_lengths must have shape [N]=[{n}], got {tuple(lengths.shape)}")
        if lengths.dtype == torch.bool or lengths.is_complex():
            raise TypeError(f"response_lengths must be integer or floating, got {lengths.dtype}")
        lengths = lengths.to(torch.float64).contiguous()
        if check_lengths and (lengths < 0).any():
            raise ValueError(f"response_lengths must be >= 0; row {int(torch.nonzero(lengths < 0)[0])} is negative")
    if batch_norm == "token" and mask is None and lengths is None:
        raise ValueError('batch_norm="token" needs response_mask or response_lengths for token weights')
    return mask, lengths


def check_reward_values(rewards: torch.Tensor, nan_policy: str, infinite: bool) -> None:
    """No +-Inf reward (when `infinite`), and no NaN under nan_policy="raise". Under nan_policy="raise" the
    rewards are read here anyway, and an Inf is still reported before a NaN."""
    if infinite:
        _finite_or_raise("rewards", rewards)
    if nan_policy == "raise" and torch.isnan(rewards).any():
        row, col = torch.nonzero(torch.isnan(rewards))[0].tolist()
        raise ValueError(f'rewards has NaN at row {row}, column {col} and nan_policy="raise"')
