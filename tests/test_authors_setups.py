"""The authors' two DARA estimators, written here from their published
definitions (repository zhaihaotian/DARA: docs/ALGORITHMS.md, the math
estimator math/rdgdpo/advantages.py), independent of the op's code, against
`fused_advantage` on every backend (CUDA where a GPU is present):

- tool calling (verl): verl's group statistics (a group of one: mean 0,
  std 1), density weights or static weights, token-level whitening over the
  response mask with the unbiased token variance and rsqrt(var + 1e-8):
  `preset="verl"` with a `response_mask`;
- math: group z-scores with the sample std + 1e-6, then per response
  normalisation with the sample std + 1e-6: `preset=None`, the defaults.

Both with DARA-Asym (their main method: only positive advantages amplified),
DARA-Sym, Static-Asym and Static-Sym (w = 5 on one reward)."""
import math

import pytest
import torch

import dara_kernels as dk
from tests.backend_devices import device_for
from tests.compare import tolerance

EPS, TAU, W_MAX = 1e-6, 1e-8, 5.0


def z_scores(rewards, groups, verl_singletons):
    z = torch.zeros_like(rewards)
    for rows in groups:
        values = rewards[rows]
        if len(rows) == 1 and verl_singletons:
            mean, std = torch.zeros_like(values[0]), torch.ones_like(values[0])
        else:
            mean, std = values.mean(0), values.std(0, correction=1)
        z[rows] = (values - mean) / (std + EPS)
    return z


def density(z, groups):
    """The share of groups in which a reward's z-scores are not all zero."""
    return torch.stack([z[rows].abs().sum(0) > TAU for rows in groups]).double().mean(0)


def density_weights(pi):
    """min(w_max, sqrt(max pi / pi_k)): the densest reward weighs 1; a reward active nowhere is logged at w_max."""
    weights = torch.full_like(pi, W_MAX)
    live = pi > 0
    weights[live] = torch.sqrt(pi[live].max() / pi[live]).clamp(max=W_MAX)
    return weights


def calibrated_sum(z, weights, calibration):
    if calibration == "positive":
        return (z + (weights - 1) * z.clamp(min=0)).sum(1)
    return (z * weights).sum(1)


def authors_estimator(rewards, groups, calibration, setup, mask=None, static=None):
    """(advantages per response, or per token for tool calling; density; weights)."""
    z = z_scores(rewards, groups, verl_singletons=setup == "toolcall")
    pi = density(z, groups)
    weights = torch.tensor(static, dtype=torch.float64) if static is not None else density_weights(pi)
    s = calibrated_sum(z, weights, calibration)
    if setup == "math":
        return (s - s.mean()) / (s.std(correction=1) + EPS), pi, weights
    values = s[:, None] * mask
    tokens = mask.sum()
    mean = values.sum() / tokens
    var = ((values - mean) ** 2 * mask).sum() / (tokens - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8) * mask, pi, weights


def paper_batch(seed, prompts=512, group=4, format_rate=0.002):
    """The paper's tool-calling shape: 512 prompts x 4; correctness ~30%, a rare format reward, length ~50%."""
    gen = torch.Generator().manual_seed(seed)
    n = prompts * group
    rates = torch.tensor([0.3, format_rate, 0.5])
    rewards = (torch.rand(n, 3, generator=gen) < rates).double()
    rewards[torch.randint(0, n, (3,), generator=gen), 1] = 1.0  # a handful of format hits: the cap binds
    order = torch.randperm(n, generator=gen)
    uids = (torch.arange(n) // group)[order]
    return rewards[order], uids, token_mask(gen, n)


def uneven_batch(seed, groups=60):
    """Groups of 2 to 9 responses in shuffled order, graded rewards with ties."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(2, 10, (groups,), generator=gen)
    uids = torch.repeat_interleave(torch.arange(groups) * 7 + 3, sizes)
    n = uids.numel()
    rewards = torch.stack([(torch.rand(n, generator=gen) < 0.4).double(),
                           torch.randint(0, 3, (n,), generator=gen).double() * (torch.rand(n, generator=gen) < 0.1),
                           torch.randn(n, generator=gen, dtype=torch.float64)], 1)
    order = torch.randperm(n, generator=gen)
    return rewards[order], uids[order], token_mask(gen, n)


def token_mask(gen, n, t=24):
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    return (torch.arange(t)[None, :] < lengths[:, None]).double()


def groups_of(uids):
    return [torch.nonzero(uids == u).flatten() for u in uids.unique()]


BACKENDS = ["reference", "cpu", "triton", "cuda"]
ARMS = [  # (label, calibration, static weights or None)
    ("DARA-Asym", "positive", None), ("DARA-Sym", "symmetric", None),
    ("Static-Asym", "positive", [1.0, 1.0, 5.0]), ("Static-Sym", "symmetric", [1.0, 1.0, 5.0]),
]


def ours(backend, rewards, uids, mask, calibration, setup, static):
    device = torch.device(device_for(backend))
    if dk.unavailable_reason(backend, device) is not None:
        pytest.skip(dk.unavailable_reason(backend, device))
    options = dict(method="static", reward_weights=static) if static is not None else dict(method="dara")
    if setup == "toolcall":
        options.update(preset="verl", response_mask=mask.to(device))
    return dk.fused_advantage(rewards.float().to(device), group_index=uids.to(device), calibration=calibration,
                              backend=backend, **options)


def largest_difference(out, expected, setup):
    got = (out.token_advantages if setup == "toolcall" else out.advantages).double().cpu()
    return (got - expected).abs().max().item() / max(1.0, expected.abs().max().item())


@pytest.mark.parametrize("setup", ["toolcall", "math"])
@pytest.mark.parametrize("label,calibration,static", ARMS, ids=[a[0] for a in ARMS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_equals_the_authors_estimator(backend, label, calibration, static, setup):
    # The Triton interpreter runs programs one after another: a smaller paper-shaped batch there.
    prompts = 64 if backend == "triton" else 512
    for rewards, uids, mask in (paper_batch(0, prompts), uneven_batch(1)):
        expected, pi, weights = authors_estimator(rewards, groups_of(uids), calibration, setup, mask, static)
        out = ours(backend, rewards, uids, mask, calibration, setup, static)
        err = largest_difference(out, expected, setup)
        print(f"{backend} {label} {setup}: largest difference {err:.2e}")
        allowed = 1e-6 if backend == "reference" else tolerance(backend, torch.float32)
        assert err <= allowed, f"{label} {setup}: {err:.3g}"
        torch.testing.assert_close(out.density.double().cpu(), pi, rtol=0, atol=1e-7)
        if static is None:
            torch.testing.assert_close(out.weights.double().cpu(), weights, rtol=1e-6, atol=0)


def test_the_cap_binds_on_the_paper_batch():
    """At a format rate of 0.2% the format reward is active in a handful of 512 groups: its weight is the cap."""
    rewards, uids, _ = paper_batch(0)
    out = dk.fused_advantage(rewards, group_index=uids, backend="reference")
    assert out.weights[1].item() == W_MAX and out.weights[1] < math.sqrt(out.density.max() / out.density[1])


def test_a_verl_singleton_with_a_reward_is_active_for_the_authors_only():
    """The one edge where the rules differ (docs/spec.md, DARA): under verl's rule a group of one has
    mean 0 and std 1, so a non-zero reward gives it a non-zero z-score, which the authors' density counts
    as active; the package's density counts only groups whose reward varies."""
    rewards = torch.tensor([[1.0], [1.0], [0.0], [1.0]], dtype=torch.float64)
    uids = torch.tensor([0, 1, 1, 2])
    z = z_scores(rewards, groups_of(uids), verl_singletons=True)
    assert density(z, groups_of(uids)).item() == 1.0
    out = dk.fused_advantage(rewards, group_index=uids, preset="verl", response_lengths=torch.ones(4),
                             backend="reference")
    assert out.density.item() == pytest.approx(1 / 3)
