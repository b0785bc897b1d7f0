"""Resolve method, preset and keyword options into one immutable option set.

Precedence: an explicit keyword beats the preset, the preset beats the
method's default. The resolved set is what every backend receives; its
`kernel_vector()` is the `float[]` the compiled ops take, in the order of
`wire.OPTION_FIELDS`. Defaults and presets: docs/spec.md#presets.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from .wire import BATCH_NORM_CODE, BATCH_NORMS, METHOD_CODE, METHODS, OPTION_FIELDS

PRESETS = ("default", "trl", "verl")
NAN_POLICIES = ("ignore", "zero", "raise")
SINGLETON_RULES = ("zero", "verl")
CALIBRATIONS = ("positive", "symmetric")
# Options that exist for some methods only, with those methods' defaults: a
# calibration applies to the methods whose s_j is a weighted sum of the A_jk,
# the cap to DARA's weights. DARA's defaults are the authors' main method,
# DARA-Asym: only positive advantages are amplified, by at most 5x the
# densest reward's weight.
_METHOD_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "dara": {"calibration": "positive", "max_weight": 5.0},
    "static": {"calibration": "symmetric"},
}
_METHOD_ONLY = {name: tuple(m for m, defaults in _METHOD_DEFAULTS.items() if name in defaults)
                for name in ("calibration", "max_weight")}

_PRESET_VALUES: Mapping[str, Mapping[str, Any]] = {
    "default": {},
    "trl": {"eps": 1e-4, "bn_eps": 1e-4, "nan_policy": "ignore", "unbiased": True,
            "batch_norm": "response"},
    "verl": {"eps": 1e-6, "singleton": "verl", "batch_norm": "token", "bn_eps": 1e-8},
}

_DEFAULTS: Mapping[str, Any] = {
    "eps": 1e-6, "unbiased": True, "scale_by_std": True, "bn_eps": 1e-6,
    "nan_policy": "ignore", "active_tol": 1e-6, "alpha": 0.5, "density_floor": 0.0,
    "saw_delta": 1e-3, "sa_gamma": 1.0, "apply_query_scale": True, "singleton": "zero",
}


def default_batch_norm(method: str) -> str:
    """Table 5 of the paper: GRPO and DVAO are not batch-normalised."""
    return "none" if method in ("grpo", "dvao") else "response"


@dataclasses.dataclass(frozen=True)
class AdvantageOptions:
    method: str
    preset: str
    eps: float
    unbiased: bool
    scale_by_std: bool
    batch_norm: str
    bn_eps: float
    nan_policy: str
    active_tol: float
    alpha: float
    density_floor: float
    saw_delta: float
    sa_gamma: float
    apply_query_scale: bool
    singleton: str
    calibration: Optional[str]   # "positive" | "symmetric" for dara and static, else None
    max_weight: Optional[float]  # dara only (math.inf: no cap), else None

    def __post_init__(self) -> None:
        # kernel_vector() without and with reject_inf, packed once per option
        # set: a small batch's call would otherwise spend microseconds hashing
        # the options to look them up. Not a field (no part of ==, hash or repr).
        object.__setattr__(self, "kernel_vectors", (self.kernel_vector(False), self.kernel_vector(True)))

    def kernel_vector(self, reject_inf: bool = False) -> list[float]:
        """reject_inf: the kernel raises on a +-Inf reward (the CPU kernel's own check)."""
        values = {"reject_inf": reject_inf}
        return [float(values[name] if name in values else
                      _ENCODED[name](self) if name in _ENCODED else getattr(self, name))
                for name, _ in OPTION_FIELDS]


# Packed fields whose kernel value is a code or flag rather than the option itself.
_ENCODED = {
    "method": lambda o: METHOD_CODE[o.method],
    "batch_norm": lambda o: BATCH_NORM_CODE[o.batch_norm],
    "nan_to_zero": lambda o: o.nan_policy == "zero",
    "singleton_verl": lambda o: o.singleton == "verl",
    "calibration_positive": lambda o: o.calibration == "positive",
    "max_weight": lambda o: math.inf if o.max_weight is None else o.max_weight,
}


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; expected one of {', '.join(allowed)}")
    return value


def _non_negative(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _max_weight(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"max_weight must be a real number, got {type(value).__name__}")
    value = float(value)
    if not value > 0.0:
        raise ValueError(f"max_weight must be > 0 (math.inf for no cap), got {value}")
    return value


def resolve_options(method: str, preset: str | None, **given: Any) -> AdvantageOptions:
    """Merge explicit keywords (None means 'not given') over preset and defaults."""
    method = _choice("method", method, METHODS)
    preset = _choice("preset", "default" if preset is None else preset, PRESETS)
    merged = dict(_DEFAULTS)
    merged["batch_norm"] = default_batch_norm(method)
    merged.update(_PRESET_VALUES[preset])
    given = {k: v for k, v in given.items() if v is not None}
    for name, methods in _METHOD_ONLY.items():
        if name in given and method not in methods:
            raise ValueError(f"{name} applies to method={' or '.join(map(repr, methods))} only, "
                             f"not method={method!r}")
    merged.update({"calibration": None, "max_weight": None, **_METHOD_DEFAULTS.get(method, {})})
    merged.update(given)

    for name in ("eps", "bn_eps", "active_tol", "alpha", "density_floor", "saw_delta", "sa_gamma"):
        merged[name] = _non_negative(name, merged[name])
    if merged["density_floor"] > 1.0:
        raise ValueError(f"density_floor must be in [0, 1], got {merged['density_floor']}")
    for name in ("unbiased", "scale_by_std", "apply_query_scale"):
        merged[name] = _flag(name, merged[name])
    merged["batch_norm"] = _choice("batch_norm", merged["batch_norm"], BATCH_NORMS)
    merged["nan_policy"] = _choice("nan_policy", merged["nan_policy"], NAN_POLICIES)
    merged["singleton"] = _choice("singleton", merged["singleton"], SINGLETON_RULES)
    if merged["calibration"] is not None:
        merged["calibration"] = _choice("calibration", merged["calibration"], CALIBRATIONS)
    if merged["max_weight"] is not None:
        merged["max_weight"] = _max_weight(merged["max_weight"])
    return AdvantageOptions(method=method, preset=preset, **merged)
