"""Comparison of an AdvantageOutput against the float64 reference, as an assertion."""
from __future__ import annotations

from dara_kernels.check.compare import TOLERANCES, compare

__all__ = ["TOLERANCES", "assert_matches"]


def assert_matches(out, ref, tol: float, context: str = "") -> None:
    result = compare(out, ref)
    assert result.problem is None, f"{context}: {result.problem}"
    assert result.error <= tol, f"{context}: {result.field} relative error {result.error:.3g} > {tol:g}"
