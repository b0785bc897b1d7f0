"""An AdvantageOutput against the float64 reference: the worst relative error
over its fields, and the tolerance each backend is held to."""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

# Tolerance on |out - ref| / scale, scale = max(1, max|ref|), by (backend, reward dtype).
# CPU accumulates in float64 for every input dtype: only the float32 output rounds.
TOLERANCES = {
    "cpu": {torch.float64: 2e-6, torch.float32: 1e-5, torch.bfloat16: 1e-5, torch.float16: 1e-5},
    "triton": {torch.float64: 1e-4, torch.float32: 1e-4, torch.bfloat16: 1e-4, torch.float16: 1e-4},
    "cuda": {torch.float64: 1e-4, torch.float32: 1e-4, torch.bfloat16: 1e-4, torch.float16: 1e-4},
}

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
    if torch.isnan(a).any():
        return math.inf, f"{name} has NaN"
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
