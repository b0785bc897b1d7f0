"""The backend-vs-reference comparison shared by each backend's test file."""
from __future__ import annotations

import itertools

import torch

import dara_kernels as dk
from tests.cases import FIXED_LAYOUTS, make_case
from tests.compare import TOLERANCES, assert_matches

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
KS = [1, 2, 3, 7]
LAYOUTS = ["fixed", "shuffled"]


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
    ref = dk.fused_advantage(case.rewards, backend="reference", **options, **kwargs)
    on_device = {key: (v.to(device) if isinstance(v, torch.Tensor) else v) for key, v in kwargs.items()}
    out = dk.fused_advantage(case.rewards.to(device), backend=backend, **options, **on_device)
    assert_matches(out, ref, TOLERANCES[backend][dtype], f"{case.label} {options}")


def sweep_against_reference(backend: str, method: str, layout: str, k: int, dtype: torch.dtype,
                            shapes=None, batch_norms=("response", "token", "none"),
                            nan_policies=("ignore", "zero"), device: str = "cpu", nan_fraction: float = 0.15) -> int:
    shapes = shapes or (FIXED_LAYOUTS if layout == "fixed" else [(97,), (40,)])
    runs = 0
    for seed, (shape, bn, policy) in enumerate(itertools.product(shapes, batch_norms, nan_policies)):
        compare_once(backend, method, layout, k, dtype, shape, bn, policy, seed, device, nan_fraction)
        runs += 1
    return runs
