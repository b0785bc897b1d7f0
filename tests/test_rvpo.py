"""RVPO (method="rvpo") against an implementation written from its formula
(docs/spec.md#aggregation): per-reward group z-scores, their soft minimum
s_j = -(1/k) ln((1/K) sum_k exp(-k z_jk)), then the batch normalisation; and
its two limits, k -> 0 (the mean of the z-scores) and k -> infinity (their
minimum)."""
import math

import pytest
import torch

import dara_kernels as dk
from dara_kernels.check.cases import offset_rewards
from tests.backend_devices import device_for

BACKENDS = ["reference"] + [name for name in ("cpu", "cuda", "triton")
                             if dk.unavailable_reason(name, torch.device(device_for(name))) is None]


def run(rewards, *args, backend, **kwargs):
    """fused_advantage on the backend's device; outputs back on the CPU."""
    device = device_for(backend)
    on_device = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    out = dk.fused_advantage(rewards.to(device), *args, backend=backend, **on_device)
    return type(out)(*(t.cpu() if isinstance(t, torch.Tensor) else t for t in out))


def from_formula(rewards, group, k, eps=1e-6, bn_eps=1e-6, weights=None, token_weights=None):
    """Plain loops over groups, rows and rewards, in float64."""
    n, num = rewards.shape
    weights = weights or [1.0] * num
    z = [[0.0] * num for _ in range(n)]
    for g0 in range(0, n, group):
        for c in range(num):
            values = [float(rewards[j, c]) for j in range(g0, g0 + group)]
            mean = sum(values) / group
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (group - 1))
            if std > 1e-6:  # active_tol: z is 0 in a group where the reward does not vary
                for i, v in enumerate(values):
                    z[g0 + i][c] = weights[c] * (v - mean) / (std + eps)
    # exp(-k z) overflows a double at k = 1e3 unless the row's minimum is taken out first.
    s = [min(row) - math.log(sum(math.exp(-k * (x - min(row))) for x in row) / num) / k for row in z]
    if token_weights is None:
        mean = sum(s) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1))
        return torch.tensor([(x - mean) / (std + bn_eps) for x in s], dtype=torch.float64)
    total = sum(token_weights)
    mean = sum(w * x for w, x in zip(token_weights, s)) / total
    var = sum(w * (x - mean) ** 2 for w, x in zip(token_weights, s)) / (total - 1)
    return torch.tensor([(x - mean) / math.sqrt(var + bn_eps) for x in s], dtype=torch.float64)


def _rewards(seed=0, n=64):
    """K = 4: correctness, a rare format reward, a graded length reward, and a reward active nowhere."""
    gen = torch.Generator().manual_seed(seed)
    correct = (torch.rand(n, generator=gen) < 0.4).double()
    fmt = (torch.rand(n, generator=gen) < 0.05).double()
    length = torch.randint(0, 5, (n,), generator=gen).double()
    return torch.stack([correct, fmt, length, torch.full((n,), 3.0, dtype=torch.float64)], 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1e-3, 1.0, 7.5, 1e3])
def test_matches_the_formula(backend, k):
    rewards = _rewards()
    expected = from_formula(rewards, 4, k)
    out = run(rewards.float(), 4, method="rvpo", rvpo_k=k, backend=backend)
    torch.testing.assert_close(out.advantages.double(), expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_the_formula_with_weights_offsets_and_token_whitening(backend):
    """The authors' tool-calling setup: token whitening (verl preset: eps 1e-6, bn_eps 1e-8), k = 1."""
    gen = torch.Generator().manual_seed(3)
    rewards = offset_rewards(gen, 48, 100.0)
    lengths = torch.randint(1, 20, (48,), generator=gen)
    weights = [1.0, 0.5, 2.0, 1.0]
    expected = from_formula(rewards, 8, 1.0, bn_eps=1e-8, weights=weights, token_weights=lengths.tolist())
    out = run(rewards, 8, method="rvpo", preset="verl", reward_weights=weights, response_lengths=lengths,
              backend=backend)
    torch.testing.assert_close(out.advantages.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_k_is_the_mean_of_the_z_scores(backend):
    """k -> 0: s_j -> (1/K) sum_k z_jk, GDPO's sum up to a factor that response normalisation removes."""
    rewards = _rewards(1).float()
    gdpo = run(rewards, 4, method="gdpo", backend=backend)
    rvpo = run(rewards, 4, method="rvpo", rvpo_k=1e-4, backend=backend)
    torch.testing.assert_close(rvpo.advantages, gdpo.advantages, rtol=0, atol=2e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_k_is_the_minimum_and_finite(backend):
    """k -> infinity: s_j -> min_k z_jk + ln(m_j / K) / k (m_j ties at the minimum): no overflow at k = 1e3."""
    rewards = _rewards(2)
    expected = from_formula(rewards, 4, 1e6)  # ln(K) / k is 1e-6 here: the minimum itself
    out = run(rewards.float(), 4, method="rvpo", rvpo_k=1e3, backend=backend)
    assert torch.isfinite(out.advantages).all()
    torch.testing.assert_close(out.advantages.double(), expected, rtol=0, atol=5e-3)


def test_diagnostics_are_gdpo_s():
    """weights report b_k, weighted_energy b_k^2 times the energy, as for GDPO."""
    rewards = _rewards(4).float()
    weights = [1.0, 2.0, 0.5, 1.0]
    gdpo = dk.fused_advantage(rewards, 4, method="gdpo", reward_weights=weights, backend="reference")
    rvpo = dk.fused_advantage(rewards, 4, method="rvpo", reward_weights=weights, backend="reference")
    for name in ("density", "weights", "energy", "weighted_energy", "active_groups"):
        torch.testing.assert_close(getattr(rvpo, name), getattr(gdpo, name))


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_risk_coefficient_must_be_positive_and_finite(value):
    with pytest.raises(ValueError, match="rvpo_k"):
        dk.resolve_options("rvpo", None, rvpo_k=value)


def test_risk_coefficient_is_rvpo_s_only():
    with pytest.raises(ValueError, match="rvpo_k applies to method='rvpo' only"):
        dk.resolve_options("gdpo", None, rvpo_k=1.0)
    assert dk.resolve_options("rvpo", None).rvpo_k == 1.0
    assert dk.resolve_options("rvpo", "verl").batch_norm == "token"
    assert dk.resolve_options("rvpo", None).batch_norm == "response"
