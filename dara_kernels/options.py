"""Resolve method, preset and keyword options into one immutable option set.

Precedence: an explicit keyword beats the preset, the preset beats the
method's default. The resolved set is what every backend receives; its
`kernel_vector()` is the `float[]` the compiled ops take, in the order of
`wire.KERNEL_FIELDS`. Every option's check, default and encoding is a row of
`wire.OPTIONS` / `wire.KERNEL_FIELDS`; defaults and presets: docs/spec.md#presets.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from .wire import (
    KERNEL_FIELDS,
    METHOD_ONLY_OPTIONS,
    METHOD_TRAITS,
    METHODS,
    OPTIONS,
    PRESETS,
    Option,
    kernel_value,
)

_PRESET_VALUES: Mapping[str, Mapping[str, Any]] = {
    "default": {},
    "trl": {"eps": 1e-4, "bn_eps": 1e-4, "nan_policy": "ignore", "unbiased": True,
            "batch_norm": "response"},
    "verl": {"eps": 1e-6, "singleton": "verl", "batch_norm": "token", "bn_eps": 1e-8},
}

_TYPES = {"real": float, "positive": float, "cap": float, "flag": bool, "choice": str}


def _kernel_vectors(self) -> None:
    # kernel_vector() without and with reject_inf, packed once per option
    # set: a small batch's call would otherwise spend microseconds hashing
    # the options to look them up. Not a field (no part of ==, hash or repr).
    object.__setattr__(self, "kernel_vectors", (self.kernel_vector(False), self.kernel_vector(True)))


def _kernel_vector(self, reject_inf: bool = False) -> list[float]:
    """reject_inf: the kernel raises on a +-Inf reward (the CPU kernel's own check)."""
    return [float(reject_inf) if f.name == "reject_inf" else kernel_value(f, self) for f in KERNEL_FIELDS]


# One field per wire.OPTIONS row, after the method and preset; a method-only
# option is None for the other methods.
AdvantageOptions = dataclasses.make_dataclass(
    "AdvantageOptions",
    [("method", str), ("preset", str)] + [(o.name, Optional[_TYPES[o.check]]) for o in OPTIONS],
    frozen=True,
    namespace={"__post_init__": _kernel_vectors, "kernel_vector": _kernel_vector,
               "__doc__": "The resolved options of one call (wire.OPTIONS)."},
)
AdvantageOptions.__module__ = __name__


def default_batch_norm(method: str) -> str:
    return METHOD_TRAITS[method].batch_norm


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; expected one of {', '.join(allowed)}")
    return value


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _checked(option: Option, value: Any) -> Any:
    name = option.name
    if option.check == "flag":
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        return value
    if option.check == "choice":
        return _choice(name, value, option.choices)
    value = _real(name, value)
    if option.check == "cap":
        if not value > 0.0:
            raise ValueError(f"{name} must be > 0 (math.inf for no cap), got {value}")
    elif option.check == "positive":
        if not (value > 0.0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    elif not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    if option.upper is not None and value > option.upper:
        raise ValueError(f"{name} must be in [0, {option.upper:g}], got {value}")
    return value


def resolve_options(method: str, preset: str | None, **given: Any) -> AdvantageOptions:
    """Merge explicit keywords (None means 'not given') over preset and defaults."""
    method = _choice("method", method, METHODS)
    preset = _choice("preset", "default" if preset is None else preset, PRESETS)
    unknown = set(given) - {o.name for o in OPTIONS}
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(sorted(unknown))}")
    traits = METHOD_TRAITS[method]
    merged = {o.name: o.default for o in OPTIONS}
    merged["batch_norm"] = traits.batch_norm
    merged.update(_PRESET_VALUES[preset])
    given = {k: v for k, v in given.items() if v is not None}
    for name, methods in METHOD_ONLY_OPTIONS.items():
        if name in given and method not in methods:
            raise ValueError(f"{name} applies to method={' or '.join(map(repr, methods))} only, "
                             f"not method={method!r}")
    merged.update(traits.options)
    merged.update(given)
    for option in OPTIONS:
        if merged[option.name] is not None:
            merged[option.name] = _checked(option, merged[option.name])
    return AdvantageOptions(method=method, preset=preset, **merged)
