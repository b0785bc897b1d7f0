"""Resolve method, preset and keyword options into one immutable option set.

Precedence: an explicit keyword beats the preset, the preset beats the
method's default. The resolved set is what every backend receives; its
`kernel_vector()` is the `float[]` the compiled ops take, in the order of
`tables.KERNEL_FIELDS`. Every option's check, default and encoding is a row of
`tables.OPTIONS` / `tables.KERNEL_FIELDS`; defaults and presets: docs/spec.md#presets.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from .tables import (
    GATE_PAIRS,
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

_TYPES = {"real": float, "positive": float, "cap": float, "flag": bool, "choice": str, "names": tuple,
          "gates": tuple}


def _kernel_vectors(self) -> None:
    # kernel_vector() without and with reject_inf, packed once per option
    # set: a small batch's call would otherwise spend microseconds hashing
    # the options to look them up. Not a field (no part of ==, hash or repr).
    object.__setattr__(self, "kernel_vectors", (self.kernel_vector(False), self.kernel_vector(True)))


def _kernel_vector(self, reject_inf: bool = False) -> list[float]:
    """reject_inf: the kernel raises on a +-Inf reward (the CPU kernel's own check)."""
    scalars = [float(reject_inf) if f.name == "reject_inf" else kernel_value(f, self) for f in KERNEL_FIELDS]
    return scalars + [float(column) for pair in getattr(self, GATE_PAIRS) or () for column in pair]


# One field per tables.OPTIONS row, after the method and preset; a method-only
# option is None for the other methods.
AdvantageOptions = dataclasses.make_dataclass(
    "AdvantageOptions",
    [("method", str), ("preset", str)] + [(o.name, Optional[_TYPES[o.check]]) for o in OPTIONS],
    frozen=True,
    namespace={"__post_init__": _kernel_vectors, "kernel_vector": _kernel_vector,
               "__doc__": "The resolved options of one call (tables.OPTIONS)."},
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


def _names(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) and v for v in value):
        raise TypeError(f"{name} must be a list of non-empty strings, one per reward column, got {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} must not repeat a name, got {list(value)}")
    return tuple(value)


def _gate_pairs(name: str, value: Any) -> tuple:
    """A mapping {gated: gate}, or its items as pairs; each a reward name or column index."""
    pairs = tuple(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(pairs, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise TypeError(f'{name} must be a mapping {{gated: gate}}, e.g. {{"length": "correct"}}, got {value!r}')
    for column in (c for pair in pairs for c in pair):
        if isinstance(column, bool) or not isinstance(column, (str, int)):
            raise TypeError(f"{name}: a reward is a name or a column index, got {column!r}")
    return tuple(tuple(p) for p in pairs)


def _checked(option: Option, value: Any) -> Any:
    name = option.name
    if option.check == "names":
        return _names(name, value)
    if option.check == "gates":
        return _gate_pairs(name, value)
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
    if merged[GATE_PAIRS] is not None:
        merged[GATE_PAIRS] = resolve_gates(merged[GATE_PAIRS], merged["reward_names"])
    return AdvantageOptions(method=method, preset=preset, **merged)


def _column(reward, names: Optional[tuple[str, ...]]) -> int:
    if isinstance(reward, int):
        if reward < 0:
            raise ValueError(f"reward_gates: column index {reward} is negative; columns are 0 to K - 1")
        return reward
    if names is None:
        raise ValueError(f"reward_gates names the reward {reward!r}: pass reward_names=[...] (one name per "
                         "column) or give column indices")
    if reward not in names:
        raise ValueError(f"reward_gates: no reward named {reward!r}; reward_names are {', '.join(names)}")
    return names.index(reward)


def resolve_gates(pairs: tuple, names: Optional[tuple[str, ...]]) -> Optional[tuple[tuple[int, int], ...]]:
    """(gated, gate) column pairs, sorted, or None for no gate (docs/spec.md#reward-gates):
    no reward gated twice or by itself, and no chain (a gate that is itself gated)."""
    if not pairs:
        return None
    label = (lambda c: names[c] if names is not None and c < len(names) else str(c))
    gate_of: dict[int, int] = {}
    for gated, gate in pairs:
        b, a = _column(gated, names), _column(gate, names)
        if a == b:
            raise ValueError(f"reward_gates: reward {label(b)!r} cannot gate itself")
        if b in gate_of:
            raise ValueError(f"reward_gates: reward {label(b)!r} is given two gates")
        gate_of[b] = a
    for b, a in gate_of.items():
        if a not in gate_of:
            continue
        if gate_of[a] == b:
            raise ValueError(f"reward_gates: {label(b)!r} and {label(a)!r} gate each other (a cycle)")
        path, c = [b, a], a
        while c in gate_of and gate_of[c] not in path:
            c = gate_of[c]
            path.append(c)
        if c in gate_of:
            cycle = " -> ".join(repr(label(x)) for x in path + [gate_of[c]])
            raise ValueError(f"reward_gates has a cycle: {cycle}")
        raise ValueError(f"reward_gates: {label(a)!r} gates {label(b)!r} and is itself gated by "
                         f"{label(gate_of[a])!r}; a gate cannot be gated (no chains): gate {label(b)!r} on "
                         f"{label(gate_of[a])!r} directly, or drop one of the two")
    return tuple(sorted(gate_of.items()))
