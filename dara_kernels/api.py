"""`fused_advantage`: the one public op."""
from __future__ import annotations

import functools
from typing import Mapping, Optional, Sequence, Union

import torch

from . import backends
from .distributed import distributed_advantage
from .options import AdvantageOptions, resolve_options
from .output import AdvantageOutput
from .validation import prepare_inputs, reward_matrix
from .wire import COLUMN_OPTIONS, OPTION_KINDS, OPTIONS

TensorLike = Union[torch.Tensor, Sequence[float]]

# Distinct option sets a process keeps resolved; a trainer uses a handful.
_OPTIONS_CACHE_SIZE = 256


@functools.lru_cache(maxsize=_OPTIONS_CACHE_SIZE)
def _resolved(method, preset, given: tuple) -> AdvantageOptions:
    return resolve_options(method, preset, **{name: value for name, _, value in given})


# Each option's cache key, by its kind (wire.OPTION_KINDS).
_CACHE_KEYS = {o.name: OPTION_KINDS[o.kind].cache_key for o in OPTIONS}


def _types(value):
    """The type of a value and of everything inside it."""
    if isinstance(value, Mapping):
        value = tuple(value.items())
    if isinstance(value, (list, tuple)):
        return type(value), tuple(_types(v) for v in value)
    return type(value)


def _options(method, preset, **given) -> AdvantageOptions:
    """resolve_options, cached: a small batch would otherwise spend a quarter
    of its call here. The key holds the type of each value and of everything
    inside it, so values equal as keys (1 and True, {0: 1} and {0.0: 1}) are
    still checked separately."""
    if torch.compiler.is_compiling():
        # Dynamo traces through an lru_cache (and warns that it does): resolving once per trace is the same.
        return resolve_options(method, preset, **given)
    key = tuple((name, _types(value), _CACHE_KEYS[name](value)) for name, value in given.items()
                if value is not None)
    try:
        return _resolved(method, preset, key)
    except TypeError as err:
        if "unhashable" not in str(err):
            raise
        return resolve_options(method, preset, **given)


def fused_advantage(
    rewards: torch.Tensor,
    group_size: Optional[int] = None,
    *,
    group_index: Optional[torch.Tensor] = None,
    method: str = "dara",
    preset: Optional[str] = None,
    reward_weights: Optional[TensorLike] = None,
    response_mask: Optional[torch.Tensor] = None,
    response_lengths: Optional[torch.Tensor] = None,
    reward_bounds: Optional[TensorLike] = None,
    # BEGIN GENERATED option keywords: one per wire.OPTIONS row (python scripts/generate_wire.py)
    eps: Optional[float] = None,
    unbiased: Optional[bool] = None,
    scale_by_std: Optional[bool] = None,
    batch_norm: Optional[str] = None,
    bn_eps: Optional[float] = None,
    nan_policy: Optional[str] = None,
    active_tol: Optional[float] = None,
    alpha: Optional[float] = None,
    density_floor: Optional[float] = None,
    saw_delta: Optional[float] = None,
    sa_gamma: Optional[float] = None,
    apply_query_scale: Optional[bool] = None,
    singleton: Optional[str] = None,
    calibration: Optional[str] = None,
    max_weight: Optional[float] = None,
    rvpo_k: Optional[float] = None,
    no_signal: Optional[str] = None,
    reward_names: Optional[Sequence[str]] = None,
    reward_gates: Optional[Mapping[Union[str, int], Union[str, int]]] = None,
    # END GENERATED option keywords
    backend: str = "auto",
    validate: bool = True,
    process_group=None,
) -> AdvantageOutput:
    """Multi-reward advantages as defined in docs/spec.md (the package contract).

    rewards: [N, K] (or [N]) float tensor, one row per response, one column
    per reward; NaN marks a reward that could not score a response. Give the
    groups as `group_size` (contiguous blocks) or `group_index` (any ids).
    Options left as None take the preset's value, then the method's default
    (each option's row in wire.OPTIONS). reward_gates={"length": "correct"}
    (names from reward_names, or column indices) lets a reward count only
    where its gate passes (docs/spec.md#reward-gates).
    """
    # By name, not from locals(): torch.compile (2.11) cannot trace locals().
    opts = _options(
        method, preset,
        # BEGIN GENERATED option arguments: each option keyword by name (python scripts/generate_wire.py)
        eps=eps, unbiased=unbiased, scale_by_std=scale_by_std, batch_norm=batch_norm, bn_eps=bn_eps,
        nan_policy=nan_policy, active_tol=active_tol, alpha=alpha, density_floor=density_floor, saw_delta=saw_delta,
        sa_gamma=sa_gamma, apply_query_scale=apply_query_scale, singleton=singleton, calibration=calibration,
        max_weight=max_weight, rvpo_k=rvpo_k, no_signal=no_signal, reward_names=reward_names, reward_gates=reward_gates,
        # END GENERATED option arguments
    )
    rewards = reward_matrix(rewards)
    record = backends.choose_backend(backend, rewards.device, rewards.shape[1])
    inputs = prepare_inputs(
        rewards, group_size=group_size, group_index=group_index, reward_weights=reward_weights,
        response_mask=response_mask, response_lengths=response_lengths,
        reward_bounds=reward_bounds, nan_policy=opts.nan_policy, batch_norm=opts.batch_norm,
        validate=validate, kernel_checks_infinite=record.kernel_checks_infinite, distributed=process_group is not None,
        **{name: getattr(opts, name) for name in COLUMN_OPTIONS})
    if process_group is None:
        return record.run(inputs, opts)
    return distributed_advantage(record, inputs, opts, process_group)
