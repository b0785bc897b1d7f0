"""Comparison of an AdvantageOutput against the float64 reference."""
from __future__ import annotations

import torch

# Tolerance on |out - ref| / scale, scale = max(1, max|ref|), by (backend, dtype).
# CPU accumulates in float64 for every input dtype: only the float32 output rounds.
TOLERANCES = {
    "cpu": {torch.float64: 2e-6, torch.float32: 1e-5, torch.bfloat16: 1e-5, torch.float16: 1e-5},
    "triton": {torch.float64: 1e-4, torch.float32: 1e-4, torch.bfloat16: 1e-4, torch.float16: 1e-4},
    "cuda": {torch.float64: 1e-4, torch.float32: 1e-4, torch.bfloat16: 1e-4, torch.float16: 1e-4},
}

EXACT_FIELDS = ("active_groups", "num_groups", "keep", "informative", "sum_informative", "informative_groups",
                "sum_informative_groups", "conflict_groups")


def assert_matches(out, ref, tol: float, context: str = "") -> None:
    for name in ref._fields:
        expected = getattr(ref, name)
        actual = getattr(out, name)
        if expected is None:
            assert actual is None, f"{context}: {name} should be None"
            continue
        assert actual is not None, f"{context}: {name} missing"
        assert actual.shape == expected.shape, f"{context}: {name} shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"{context}: {name} dtype {actual.dtype} != {expected.dtype}"
        if name in EXACT_FIELDS:
            assert torch.equal(actual.cpu(), expected.cpu()), f"{context}: {name} differs"
            continue
        a, e = actual.double().cpu(), expected.double().cpu()
        assert not torch.isnan(a).any(), f"{context}: {name} has NaN"
        # An infinite value (DARA's weight with no cap on a reward active nowhere) must match exactly.
        infinite = torch.isinf(e)
        assert torch.equal(a[infinite], e[infinite]), f"{context}: {name} infinite entries differ"
        a, e = a[~infinite], e[~infinite]
        scale = max(1.0, e.abs().max().item()) if e.numel() else 1.0
        err = (a - e).abs().max().item() / scale if e.numel() else 0.0
        assert err <= tol, f"{context}: {name} relative error {err:.3g} > {tol:g}"
