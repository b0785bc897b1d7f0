"""Presets against the TRL and verl formula chains, rewritten here from the
trainers' documented behaviour (spec, Presets section)."""
import pytest
import torch

import dara_kernels as dk
from dara_kernels.check.cases import make_case


def trl_normalize_then_sum(rewards, g, weights):
    """TRL GRPOTrainer, multi_objective_aggregation="normalize_then_sum",
    scale_rewards="group": per reward nanmean / nan-aware unbiased std per group,
    (r - mean) / (std + 1e-4), NaN advantages count 0 in the weighted sum,
    then (x - mean) / (std + 1e-4) over the batch of scorable rows."""
    n, k = rewards.shape
    grouped = rewards.double().view(-1, g, k)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    count = (~torch.isnan(grouped)).sum(1, keepdim=True)
    var = torch.nansum((grouped - mean) ** 2, dim=1, keepdim=True) / (count - 1)
    std = var.sqrt()
    adv = ((grouped - mean) / (std + 1e-4)).view(n, k)
    adv = torch.where(torch.isnan(adv), 0.0, adv)
    summed = adv @ weights.double()
    scorable = ~torch.isnan(rewards).all(1)
    sel = summed[scorable]
    out = (summed - sel.mean()) / (sel.std() + 1e-4)
    return torch.where(scorable, out, 0.0)


def verl_gdpo(rewards, uids, weights, mask, norm_adv_by_std=True):
    """verl compute_gdpo_outcome_advantage: per component, scores grouped by
    uid; a group of one uses mean 0 and std 1, others mean and unbiased std;
    (r - mean) / (std + 1e-6); weighted sum; masked_whiten over tokens with
    an unbiased masked variance and rsqrt(var + 1e-8); times the mask."""
    n, k = rewards.shape
    total = torch.zeros(n, dtype=torch.float64)
    for c in range(k):
        col = rewards[:, c].double()
        scores = torch.zeros(n, dtype=torch.float64)
        for uid in uids.unique():
            rows = torch.nonzero(uids == uid).flatten()
            vals = col[rows]
            if len(rows) == 1:
                mean, std = torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)
            else:
                mean, std = vals.mean(), vals.std()
            scores[rows] = (vals - mean) / (std + 1e-6) if norm_adv_by_std else vals - mean
        total += weights[c] * scores
    values = total.unsqueeze(1) * mask
    m = mask.double()
    mean = (values * m).sum() / m.sum()
    var = (((values - mean) ** 2) * m).sum() / m.sum() * m.sum() / (m.sum() - 1)
    return ((values - mean) * torch.rsqrt(var + 1e-8)) * m


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("seed", range(4))
def test_trl_preset(backend, seed):
    if backend == "cpu" and not dk.extension_available():
        pytest.skip("extension not built")
    case = make_case(seed, "fixed", 3, nan_fraction=0.1, shape=(96, 8))
    weights = torch.tensor([1.0, 0.5, 2.0])
    expected = trl_normalize_then_sum(case.rewards, 8, weights)
    out = dk.fused_advantage(case.rewards, 8, method="gdpo", preset="trl", reward_weights=weights,
                             backend=backend)
    torch.testing.assert_close(out.advantages.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("seed", range(4))
def test_verl_preset(backend, seed):
    if backend == "cpu" and not dk.extension_available():
        pytest.skip("extension not built")
    case = make_case(seed, "shuffled", 3, nan_fraction=0.0, shape=(60,))
    weights = torch.tensor([1.0, 0.5, 2.0])
    expected = verl_gdpo(case.rewards, case.layout["group_index"], weights, case.mask)
    out = dk.fused_advantage(case.rewards, group_index=case.layout["group_index"], method="gdpo",
                             preset="verl", reward_weights=weights, response_mask=case.mask,
                             backend=backend)
    torch.testing.assert_close(out.token_advantages.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_verl_preset_whitens_with_bn_eps_1e_8(backend):
    """A batch whose token variance is near bn_eps (rewards 1e-4 apart, verl's norm_adv_by_std_in_grpo=False):
    verl's rsqrt(var + 1e-8) and 1e-6 differ here by half the advantage."""
    if backend == "cpu" and not dk.extension_available():
        pytest.skip("extension not built")
    case = make_case(5, "shuffled", 3, nan_fraction=0.0, shape=(60,))
    rewards = 1e-4 * case.rewards
    weights = torch.tensor([1.0, 0.5, 2.0])
    expected = verl_gdpo(rewards, case.layout["group_index"], weights, case.mask, norm_adv_by_std=False)
    out = dk.fused_advantage(rewards, group_index=case.layout["group_index"], method="gdpo", preset="verl",
                             reward_weights=weights, response_mask=case.mask, scale_by_std=False, backend=backend)
    assert out.batch_std.item() ** 2 < 1e-6  # so bn_eps = 1e-6 in its place would change every advantage
    torch.testing.assert_close(out.token_advantages.double(), expected, rtol=1e-4, atol=1e-4)


def test_explicit_keyword_beats_preset():
    opts = dk.resolve_options("gdpo", "trl", eps=0.5)
    assert opts.eps == 0.5 and opts.bn_eps == 1e-4
