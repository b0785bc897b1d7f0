"""The adapter core every framework module uses: the user's method and options, checked once when the run is
configured (`configure`), and the one call of the fused op (`advantages`), which leaves out a framework's
padding rows and puts zeros back in their place. A filter's group flags come from the same call with the same
`Settings` (groups.py), so a filter and the advantages that follow it can never disagree. The diagnostics
have the same names in every framework (`diagnostics`)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

import torch

import dara_kernels as dk
from dara_kernels.wire import OPTION_NAMES

# The keywords a framework module passes to fused_advantage from the trainer's own data.
RESERVED = frozenset({"group_size", "group_index", "reward_weights", "method", "process_group", "response_mask",
                      "response_lengths"})
# Every other keyword of the op reaches it from the user's options: a new option needs no edit here.
KEYWORDS = frozenset(inspect.signature(dk.fused_advantage).parameters) - RESERVED - {"rewards"}
_RESOLVED = frozenset(OPTION_NAMES)


@dataclass(frozen=True)
class Settings:
    """What a user configured: the op's method and keywords, and where they were set (for errors)."""
    method: str
    options: Mapping[str, Any]
    where: str


@dataclass(frozen=True)
class Honoured:
    """A framework setting that changes the advantages, as the drop-in honours it: the setting's name as the user
    writes it, its value, the op's keywords it maps to, and whether the value is the framework's default."""
    setting: str
    value: Any
    options: Mapping[str, Any]
    default: bool


def refuse(setting: str, value: Any, why: str, instead: str) -> ValueError:
    """The error for a framework setting's value that the op cannot express: the setting, the value, why, and
    what to use instead."""
    return ValueError(f"{setting}={value!r} {why}: {instead}")


def configure(method: str, options: Mapping, where: str, defaults: Optional[Mapping] = None,
              methods: Iterable[str] = dk.METHODS, honoured: Iterable[Honoured] = (),
              base: Optional[Mapping] = None) -> Settings:
    """The settings, after the op's own checks (an unknown or reserved keyword, a method-specific option for
    another method, a bad value), so that a mistake stops the launch rather than the first step. `where` names
    the user's options in every error; `methods` the methods the caller runs.

    The keywords, lowest first: `base` (what the trainer's data gives, such as the columns' reward_names),
    `defaults` (what reproduces the framework's own estimator: dropped whole when the
    user's options name a preset, which then stands for them), the keywords of the framework's `honoured` settings,
    then the user's `options`. A framework setting at a value other than its default and a user option that says
    otherwise for the same keyword stop here, both named."""
    options = dict(options)
    reserved = RESERVED & set(options)
    if reserved:
        raise ValueError(f"{where} may not set {sorted(reserved)}: the trainer provides them")
    unknown = set(options) - KEYWORDS
    if unknown:
        raise ValueError(f"{where}: {sorted(unknown)} are not fused_advantage keywords (known: {sorted(KEYWORDS)})")
    methods = tuple(methods)
    if method not in methods:
        raise ValueError(f"{where}: method {method!r} is not one of {', '.join(methods)}")
    merged = {**(base or {}), **({} if "preset" in options else (defaults or {}))}
    for setting in honoured:
        for key, value in setting.options.items():
            if not setting.default and key in options and options[key] != value:
                raise ValueError(f"{setting.setting}={setting.value!r} means {key}={value!r}, but {where} sets "
                                 f"{key}={options[key]!r}: set one of them")
        merged.update(setting.options)
    options = {**merged, **options}
    try:
        dk.resolve_options(method, options.get("preset"), **{k: v for k, v in options.items() if k in _RESOLVED})
    except (TypeError, ValueError) as err:
        raise type(err)(f"{where}: {err}") from None
    return Settings(method, options, where)


# The estimators verl and SkyRL register: "dara" runs the options' `method` (default dara), "gdpo_fused" GDPO.
ESTIMATORS = ("dara", "gdpo_fused")


@dataclass(frozen=True)
class Run:
    """An estimator's settings and the reward components it reads (keys into the framework's rows)."""
    settings: Settings
    keys: list
    weights: Optional[list]


def estimator_method(estimator: str, options: Mapping, where: str) -> str:
    """The op's method an estimator of ESTIMATORS runs with the user's `options` (set at `where`)."""
    if estimator == "gdpo_fused" and "method" in options:
        raise ValueError(f"{where}.method is for the dara estimator; gdpo_fused is GDPO")
    return "gdpo" if estimator == "gdpo_fused" else options.get("method", "dara")


def estimator_run(estimator: str, options: Mapping, keys, weights, where: str, keys_setting: str,
                  defaults: Optional[Mapping] = None, keys_hint: str = "", honoured: Iterable[Honoured] = ()) -> Run:
    """The settings of `estimator` (ESTIMATORS) with the user's `options` (set at `where`) on the components
    named by `keys` (set at `keys_setting`), weighted by `weights` (one per key, or None); `defaults` and
    `honoured` as for `configure`. The keys are the columns' reward_names unless the options name them."""
    if not keys:
        raise ValueError(f"{' / '.join(ESTIMATORS)} need {keys_setting}: the reward components{keys_hint}")
    if weights is not None and len(weights) != len(keys):
        raise ValueError(f"{len(weights)} reward weights for the {len(keys)} {keys_setting}")
    options = dict(options)
    method = estimator_method(estimator, options, where)
    options.pop("method", None)
    # The components' names name the columns, so that reward_gates can gate by them.
    settings = configure(method, options, where, defaults, honoured=honoured,
                         base={"reward_names": tuple(str(key) for key in keys)})
    return Run(settings, list(keys), None if weights is None else list(weights))


@dataclass(frozen=True)
class Advantages:
    output: dk.AdvantageOutput               # the op's result over the rows it was given (padding left out)
    advantages: torch.Tensor                 # [N] every row; 0 for padding
    token_advantages: Optional[torch.Tensor]  # [N, T] every row, with a response_mask; 0 for padding


def advantages(settings: Settings, rewards: torch.Tensor, *, group_index=None, group_size: Optional[int] = None,
               reward_weights=None, response_mask: Optional[torch.Tensor] = None,
               response_lengths: Optional[torch.Tensor] = None, padding: Optional[torch.Tensor] = None,
               process_group=None) -> Advantages:
    """fused_advantage with the settings on rewards [N, K]. `padding` [N] bool marks rows a framework added to
    make its batch divisible: counted, they would be groups of their own in every density and energy, so they
    are left out and get advantage 0."""
    real = None if padding is None or not bool(padding.any()) else ~padding.to(rewards.device)
    if real is not None:
        rewards = rewards[real]
        group_index = None if group_index is None else group_index[real]
        response_mask = None if response_mask is None else response_mask[real]
        response_lengths = None if response_lengths is None else response_lengths[real]
    out = dk.fused_advantage(rewards, group_size, group_index=group_index, method=settings.method,
                             reward_weights=reward_weights, response_mask=response_mask,
                             response_lengths=response_lengths, process_group=process_group, **settings.options)
    if real is None:
        return Advantages(out, out.advantages, out.token_advantages)
    return Advantages(out, _scatter(out.advantages, real), None if out.token_advantages is None
                      else _scatter(out.token_advantages, real))


def _scatter(values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    full = values.new_zeros((real.numel(), *values.shape[1:]))
    full[real] = values
    return full


def diagnostics(out: dk.AdvantageOutput, names: Iterable[str], prefix: str = "dara/") -> dict:
    """Each reward's density, weight and energy, and the batch std, as scalar metrics."""
    metrics = {}
    for i, name in enumerate(names):
        metrics[f"{prefix}density/{name}"] = float(out.density[i])
        metrics[f"{prefix}weight/{name}"] = float(out.weights[i])
        metrics[f"{prefix}energy/{name}"] = float(out.energy[i])
    metrics[f"{prefix}batch_std"] = float(out.batch_std)
    return metrics


def with_extra_metrics(original: Callable, extra: Callable[..., Mapping]) -> Callable:
    """`original`, a framework function that returns a step's metrics dict, returning also `extra(*args)`
    (the metrics an integration stored for that step), so that the framework's own logger logs them."""
    def wrapper(*args, **kwargs):
        metrics = original(*args, **kwargs)
        metrics.update(extra(*args))
        return metrics

    return wrapper
