"""An AdvantageOutput against the float64 reference: the worst relative error
over its fields (the tolerance each backend is held to is in its record,
dara_kernels/backends.py)."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

# Counts and flags: equal or wrong.
EXACT_FIELDS = ("active_groups", "num_groups", "keep", "informative", "sum_informative", "informative_groups",
                "sum_informative_groups", "conflict_groups")


class Comparison(NamedTuple):
    error: float            # the worst relative error over the compared fields (inf on a mismatch below)
    field: str              # the field it is in
    problem: Optional[str]  # a mismatch no tolerance covers: shape, dtype, a count, a NaN, a missing output


def _field_error(name: str, actual, expected) -> tuple[float, Optional[str]]:
    if expected is None:
        return (0.0, None) if actual is None else (math.inf, f"{name} should be None")
    if actual is None:
        return math.inf, f"{name} missing"
    if actual.shape != expected.shape:
        return math.inf, f"{name} shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return math.inf, f"{name} dtype {actual.dtype} != {expected.dtype}"
    if name in EXACT_FIELDS:
        return (0.0, None) if torch.equal(actual.cpu(), expected.cpu()) else (math.inf, f"{name} differs")
    a, e = actual.double().cpu(), expected.double().cpu()
    # A NaN in either alone is a mismatch: one in the reference alone would otherwise make the error NaN,
    # which no comparison with a tolerance fails.
    a_nan, e_nan = torch.isnan(a), torch.isnan(e)
    if not torch.equal(a_nan, e_nan):
        alone = "where the reference has none" if (a_nan & ~e_nan).any() else "missing where the reference has NaN"
        return math.inf, f"{name} has NaN {alone}"
    a, e = a[~e_nan], e[~e_nan]
    # An infinite value (DARA's weight with no cap on a reward active nowhere) must match exactly.
    infinite = torch.isinf(e)
    if not torch.equal(a[infinite], e[infinite]):
        return math.inf, f"{name} infinite entries differ"
    a, e = a[~infinite], e[~infinite]
    if not e.numel():
        return 0.0, None
    return (a - e).abs().max().item() / max(1.0, e.abs().max().item()), None


def compare(out, ref) -> Comparison:
    worst = Comparison(0.0, "", None)
    for name in ref._fields:
        error, problem = _field_error(name, getattr(out, name), getattr(ref, name))
        if problem is not None:
            return Comparison(error, name, problem)
        if error > worst.error or not worst.field:
            worst = Comparison(error, name, None)
    return worst
