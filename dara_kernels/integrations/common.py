"""What every integration does the same way: check a user's options before the trainer starts, and name the
op's diagnostics in a trainer's metrics."""
from __future__ import annotations

import functools
from typing import Callable, Iterable, Mapping

import dara_kernels as dk

# The keywords an integration passes to fused_advantage from the trainer's own data.
RESERVED = frozenset({"group_size", "group_index", "reward_weights", "method", "process_group", "response_mask",
                      "response_lengths"})
_OPTION_FIELDS = frozenset(dk.AdvantageOptions.__dataclass_fields__) - {"method"}
_OTHER_KEYWORDS = frozenset({"reward_bounds", "backend", "validate"})


def check_options(method: str, options: Mapping, where: str) -> dict:
    """The options as a dict, after the op's own checks (a method-specific option for another method, a bad
    value), so that a mistake stops the launch rather than the first step. `where` names the setting."""
    options = dict(options)
    reserved = RESERVED & set(options)
    if reserved:
        raise ValueError(f"{where} may not set {sorted(reserved)}: the trainer provides them")
    unknown = set(options) - _OPTION_FIELDS - _OTHER_KEYWORDS
    if unknown:
        raise ValueError(f"{where}: {sorted(unknown)} are not fused_advantage keywords "
                         f"(known: {sorted(_OPTION_FIELDS | _OTHER_KEYWORDS)})")
    dk.resolve_options(method, options.get("preset"),
                       **{k: v for k, v in options.items() if k in _OPTION_FIELDS and k != "preset"})
    return options


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
    (the diagnostics an integration stored for that step), so that the framework's own logger logs them."""
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        metrics = original(*args, **kwargs)
        metrics.update(extra(*args))
        return metrics

    return wrapper
