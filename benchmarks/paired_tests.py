"""Paired statistics over seeds for the learning-speed verdicts: the exact
sign-flip permutation test of a mean paired difference, the exact sign test,
Holm's correction, and a Student t interval of the mean difference
(benchmarks/LEARNING.md)."""
from __future__ import annotations

import itertools
import math


def permutation_p(differences: list[float], greater: bool = False) -> float:
    """Exact paired permutation test: the share of the 2^n sign assignments of the per-seed differences whose
    mean is at least as far from 0 as the observed one (two-sided), or with `greater` at least as large (the
    one-sided test against a mean at most 0). Zeros count as either sign."""
    if not differences:
        return 1.0
    observed = math.fsum(differences) if greater else abs(math.fsum(differences))
    tolerance = 1e-9 * max(1.0, abs(observed))
    sums = (math.fsum(s * d for s, d in zip(signs, differences))
            for signs in itertools.product((1, -1), repeat=len(differences)))
    extreme = sum((total if greater else abs(total)) >= observed - tolerance for total in sums)
    return extreme / 2 ** len(differences)


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign test (binomial, p = 1/2) over the untied pairs."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def holm(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: the i-th smallest of m is multiplied by m - i + 1 (i from 1),
    made monotone and capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student t critical value (e.g. level 0.95), by bisection on the distribution function."""
    from math import gamma, sqrt

    def density(x: float) -> float:
        return gamma((df + 1) / 2) / (sqrt(df * math.pi) * gamma(df / 2)) * (1 + x * x / df) ** (-(df + 1) / 2)

    def central(x: float, pieces: int = 2000) -> float:   # P(-x < T < x), Simpson's rule
        h = x / pieces
        total = density(0) + density(x) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, pieces))
        return 2 * total * h / 3

    low, high = 0.0, 100.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if central(mid) < level else (low, mid)
    return (low + high) / 2


def mean_difference(differences: list[float], level: float = 0.95) -> dict:
    """Mean of the paired differences with its Student t interval (n - 1 degrees of freedom)."""
    n = len(differences)
    mean = math.fsum(differences) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1)) if n > 1 else float("nan")
    half = t_quantile(level, n - 1) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}
