"""Comparison of an AdvantageOutput against the float64 reference, as an assertion."""
from __future__ import annotations

from dara_kernels.backends import backend
from dara_kernels.check.compare import compare

__all__ = ["tolerance", "assert_matches"]


def tolerance(name: str, dtype) -> float:
    """The backend's tolerance for rewards of `dtype` (its record, dara_kernels/backends.py)."""
    return backend(name).tolerances[dtype]


def assert_matches(out, ref, tol: float, context: str = "") -> None:
    result = compare(out, ref)
    assert result.problem is None, f"{context}: {result.problem}"
    assert result.error <= tol, f"{context}: {result.field} relative error {result.error:.3g} > {tol:g}"
