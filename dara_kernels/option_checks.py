"""The functions the option-kind rows point at (wire.OPTION_KINDS): each
kind's check, its cache key, its sample values for the check's sweep, and the
resolution of reward gates against the reward names. Nothing here reads a
table, so the tables can name these functions."""
from __future__ import annotations

import math
from typing import Any, Hashable, Mapping, Optional

# The sample reward names and gates are for this many reward columns (check/table_sweeps.option_calls' K).
SAMPLE_COLUMNS = 4


def choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; expected one of {', '.join(allowed)}")
    return value


def real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _upper(option, value: float) -> float:
    if option.upper is not None and value > option.upper:
        raise ValueError(f"{option.name} must be in [0, {option.upper:g}], got {value}")
    return value


# Checks: (the option's row, a given value) -> the value as AdvantageOptions holds it, or an error naming it.

def check_real(option, value: Any) -> float:
    value = real(option.name, value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{option.name} must be a finite number >= 0, got {value}")
    return _upper(option, value)


def check_positive(option, value: Any) -> float:
    value = real(option.name, value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{option.name} must be a finite number > 0, got {value}")
    return _upper(option, value)


def check_cap(option, value: Any) -> float:
    value = real(option.name, value)
    if not value > 0.0:
        raise ValueError(f"{option.name} must be > 0 (math.inf for no cap), got {value}")
    return _upper(option, value)


def check_flag(option, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{option.name} must be a bool, got {type(value).__name__}")
    return value


def check_choice(option, value: Any) -> str:
    return choice(option.name, value, option.choices)


def check_names(option, value: Any) -> tuple[str, ...]:
    name = option.name
    if isinstance(value, str) or not isinstance(value, (list, tuple)) \
            or not all(isinstance(v, str) and v for v in value):
        raise TypeError(f"{name} must be a list of non-empty strings, one per reward column, got {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{name} must not repeat a name, got {list(value)}")
    return tuple(value)


def check_gates(option, value: Any) -> tuple:
    """A mapping {gated: gate}, or its items as pairs; each a reward name or column index."""
    name = option.name
    pairs = tuple(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(pairs, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise TypeError(f'{name} must be a mapping {{gated: gate}}, e.g. {{"length": "correct"}}, got {value!r}')
    for column in (c for pair in pairs for c in pair):
        if isinstance(column, bool) or not isinstance(column, (str, int)):
            raise TypeError(f"{name}: a reward is a name or a column index, got {column!r}")
    return tuple(tuple(p) for p in pairs)


# Cache keys: a given value in a hashable form (api._options; an unhashable one skips the cache).

def same(value: Any) -> Hashable:
    return value


def frozen(value: Any) -> Hashable:
    """A list of reward names or a mapping of reward gates as a tuple."""
    if isinstance(value, Mapping):
        return tuple(value.items())
    return tuple(value) if isinstance(value, list) else value


# Samples: (the option's row, its default for the method) -> the values the check's sweep runs.

def sample_real(option, default: float) -> tuple:
    """One value far from the default."""
    value = 2.0 * default if default >= 0.5 else 0.5
    return (value if option.upper is None else min(value, option.upper),)


def sample_positive(option, default: float) -> tuple:
    """1000 times either side of the default."""
    return (default / 1000.0, default * 1000.0)


def sample_cap(option, default: float) -> tuple:
    """No cap, and a cap that binds."""
    return (math.inf, default / 2.0)


def sample_flag(option, default: bool) -> tuple:
    return (not default,)


def sample_choice(option, default: Optional[str]) -> tuple:
    return option.choices


def sample_names(option, default) -> tuple:
    """A name for each of SAMPLE_COLUMNS columns."""
    return (tuple(f"reward{i}" for i in range(SAMPLE_COLUMNS)),)


def sample_gates(option, default) -> tuple:
    """Two gates by index: reward 1 counts only where reward 0 passes, reward 3 only where reward 2 does."""
    return ({1: 0, 3: 2},)


# Resolution against the reward names (OptionKind.resolve).

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


def check_against_k(name: str, columns: str, value: Any, k: int) -> None:
    """The K check of an option whose values name ("named": one per column) or index ("indexed") the K
    reward columns (wire.OptionKind.columns); the C++ bindings repeat the "indexed" one (is_reward_column)."""
    if columns == "named" and len(value) != k:
        raise ValueError(f"{name} must name each of the K={k} reward columns, got {len(value)} names: "
                         f"{list(value)}")
    if columns == "indexed":
        top = max(column for entry in value for column in entry)
        if top >= k:
            raise ValueError(f"{name}: column index {top} is out of range for K={k} reward columns (0 to {k - 1})")
