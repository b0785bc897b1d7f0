"""Resolve method, preset and keyword options into one immutable option set.

Precedence: an explicit keyword beats the preset, the preset beats the
method's default. The resolved set is what every backend receives; its
`kernel_vector()` is the `float[]` the compiled ops take, in the order of
`wire.KERNEL_FIELDS`. Every option's default and encoding is a row of
`wire.OPTIONS` / `wire.KERNEL_FIELDS`, and its check that of its kind in
`wire.OPTION_KINDS`; `AdvantageOptions` is generated from those tables
(generated_options.py); defaults and presets: docs/spec.md#presets.
"""
from __future__ import annotations

from typing import Any, Mapping

from .generated_options import AdvantageOptions
from .option_checks import choice
from .wire import METHOD_ONLY_OPTIONS, METHOD_TRAITS, METHODS, NAMED_COLUMNS, OPTION_KINDS, OPTIONS, PRESETS

__all__ = ["AdvantageOptions", "default_batch_norm", "resolve_options"]

_PRESET_VALUES: Mapping[str, Mapping[str, Any]] = {
    "default": {},
    "trl": {"eps": 1e-4, "bn_eps": 1e-4, "nan_policy": "ignore", "unbiased": True,
            "batch_norm": "response"},
    "verl": {"eps": 1e-6, "singleton": "verl", "batch_norm": "token", "bn_eps": 1e-8},
}


def default_batch_norm(method: str) -> str:
    return METHOD_TRAITS[method].batch_norm


def resolve_options(method: str, preset: str | None, **given: Any) -> AdvantageOptions:
    """Merge explicit keywords (None means 'not given') over preset and defaults."""
    method = choice("method", method, METHODS)
    preset = choice("preset", "default" if preset is None else preset, PRESETS)
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
            merged[option.name] = OPTION_KINDS[option.kind].check(option, merged[option.name])
    names = merged[NAMED_COLUMNS] if NAMED_COLUMNS is not None else None
    for option in OPTIONS:
        resolve = OPTION_KINDS[option.kind].resolve
        if resolve is not None and merged[option.name] is not None:
            merged[option.name] = resolve(merged[option.name], names)
    return AdvantageOptions(method=method, preset=preset, **merged)
