"""The backend-vs-reference comparison shared by each backend's test file: the
full sweep here, the edge sweeps from dara_kernels/check/sweeps.py (EDGE_SWEEPS
and the offsets, which the installed check runs too)."""
from __future__ import annotations

import itertools

import pytest
import torch

from dara_kernels.check.cases import make_case
from dara_kernels.check.sweeps import EDGE_SWEEPS, OFFSET_RATIOS, Call, offset_calls
from tests.compare import assert_matches, tolerance

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
KS = [1, 2, 3, 7]
LAYOUTS = ["fixed", "shuffled"]
# Odd sizes in every sweep: N = 97, groups of 1 and of 13.
FIXED_LAYOUTS = [(97, 97), (97, 1), (104, 13), (64, 8)]


def compare_once(backend: str, method: str, layout: str, k: int, dtype: torch.dtype, shape, bn: str,
                 policy: str, seed: int, device: str = "cpu", nan_fraction: float = 0.15) -> None:
    case = make_case(seed, layout, k, nan_fraction=nan_fraction, dtype=dtype, shape=shape)
    kwargs = case.kwargs(with_mask=(bn == "token" and seed % 2 == 0),
                         with_lengths=(bn == "token" and seed % 2 == 1))
    options = dict(method=method, batch_norm=bn, nan_policy=policy)
    if method in ("saw", "sa_mrpo") and seed % 3 == 0:
        options["reward_bounds"] = [(-4.0, 4.0)] * k
    if seed % 4 == 1:
        options["reward_weights"] = torch.linspace(0.5, 2.0, k).tolist()
    run_calls(backend, [Call(case.label, case.rewards, kwargs, options)], device)


def sweep_against_reference(backend: str, method: str, layout: str, k: int, dtype: torch.dtype,
                            shapes=None, batch_norms=("response", "token", "none"),
                            nan_policies=("ignore", "zero"), device: str = "cpu", nan_fraction: float = 0.15) -> int:
    shapes = shapes or (FIXED_LAYOUTS if layout == "fixed" else [(97,), (40,)])
    runs = 0
    for seed, (shape, bn, policy) in enumerate(itertools.product(shapes, batch_norms, nan_policies)):
        compare_once(backend, method, layout, k, dtype, shape, bn, policy, seed, device, nan_fraction)
        runs += 1
    return runs


def run_calls(backend: str, calls, device: str = "cpu") -> int:
    runs = 0
    for call in calls:
        try:
            ref = call.run("reference")
        except ValueError as err:
            # Bad input (an Inf under a gate): the backend raises the same error.
            with pytest.raises(ValueError) as raised:
                call.run(backend, device)
            assert str(raised.value) == str(err), call.describe()
            runs += 1
            continue
        out = call.run(backend, device)
        assert_matches(out, ref, tolerance(backend, call.rewards.dtype), call.describe())
        runs += 1
    return runs


def offset_sweep(backend: str, method: str, device: str = "cpu", ratios: tuple = OFFSET_RATIOS) -> int:
    return run_calls(backend, offset_calls(method, ratios=ratios), device)


def edge_sweep(backend: str, name: str, device: str = "cpu") -> int:
    """One of the check's edge sweeps (dara_kernels.check.sweeps.EDGE_SWEEPS) on a backend."""
    return run_calls(backend, EDGE_SWEEPS[name](), device)
