"""The oracle itself: the spec's invariants and hand-checked small cases."""
import math

import pytest
import torch

import dara_kernels as dk


def ideal_batch(seed, groups=64, size=8):
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor([0.03, 0.5, 0.9])
    return (torch.rand(groups * size, 3, generator=gen) < p).double(), size


@pytest.mark.parametrize("seed", range(5))
def test_energy_equals_groups_times_g_minus_one_times_density(seed):
    rewards, g = ideal_batch(seed)
    out = dk.fused_advantage(rewards, g, method="gdpo", eps=0.0, backend="reference")
    b = rewards.shape[0] // g
    expected = b * (g - 1) * out.density.double()
    torch.testing.assert_close(out.energy.double(), expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_dara_sym_without_a_cap_equalises_weighted_energy(seed):
    rewards, g = ideal_batch(seed)
    out = dk.fused_advantage(rewards, g, method="dara", eps=0.0, calibration="symmetric", max_weight=math.inf,
                             backend="reference")
    present = out.density > 0
    we = out.weighted_energy[present].double()
    assert present.sum() >= 2
    torch.testing.assert_close(we, we.mean().expand_as(we), rtol=1e-6, atol=0)


def test_hand_computed_gdpo_two_groups():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    out = dk.fused_advantage(rewards, 2, method="gdpo", eps=0.0, batch_norm="none",
                             backend="reference")
    s = 1 / math.sqrt(0.5)  # (1 - 0.5) / std([1, 0]) with unbiased std sqrt(0.5)
    expected = torch.tensor([0.5 * s, -0.5 * s, 0.5 * s, -0.5 * s])
    torch.testing.assert_close(out.advantages, expected.float())
    assert out.density.tolist() == [0.5, 0.5]
    assert out.active_groups.tolist() == [1, 1]


def test_nan_entries_and_unscorable_rows_get_zero():
    rewards = torch.tensor([[1.0], [0.0], [float("nan")], [1.0], [0.0], [0.5]])
    out = dk.fused_advantage(rewards, 3, method="gdpo", backend="reference")
    assert out.advantages[2] == 0
    assert not torch.isnan(out.advantages).any()


def test_gd2po_drops_conflicts_and_scales_queries():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    out = dk.fused_advantage(rewards, 4, method="gd2po_hard", backend="reference")
    assert out.keep.tolist() == [False, False, True, True]
    assert out.query_scale.tolist() == [0.5] * 4
    assert out.advantages[0] == 0 and out.advantages[1] == 0


def test_verl_singleton_rule():
    rewards = torch.tensor([[2.0], [1.0], [3.0]])
    out = dk.fused_advantage(rewards, group_index=torch.tensor([0, 1, 1]), method="gdpo",
                             singleton="verl", batch_norm="none", backend="reference")
    assert out.advantages[0].item() == pytest.approx(2.0 / (1 + 1e-6))


def test_reward_gates_follow_the_spec():
    """docs/spec.md#reward-gates by hand: the gated column as the rule writes it (a passing gate keeps the
    entry, a failing one makes it 0, a missing one makes it missing; a missing entry stays missing), fed to
    the reference without gates, gives the same result as the gate."""
    nan = float("nan")
    gate = [1.0, 0.0, nan, 1.0, 0.0, nan, 2.0, -1.0]
    value = [5.0, 5.0, 5.0, nan, nan, nan, 3.0, 3.0]
    by_hand = [5.0, 0.0, nan, nan, nan, nan, 3.0, 0.0]
    rewards = torch.tensor([gate, value]).T
    for method in ("gdpo", "grpo", "saw"):
        gated = dk.fused_advantage(rewards, 4, method=method, reward_gates={"length": "correct"},
                                   reward_names=["correct", "length"], backend="reference")
        expected = dk.fused_advantage(torch.tensor([gate, by_hand]).T, 4, method=method, backend="reference")
        for name, a, b in zip(gated._fields, gated, expected):
            if a is not None:
                assert torch.equal(a, b), (method, name)
    # nan_policy="zero" scores a missing gate as 0 first, so it fails.
    zeroed = dk.fused_advantage(rewards, 4, reward_gates={1: 0}, nan_policy="zero", backend="reference")
    expected = dk.fused_advantage(torch.tensor([[0.0 if g != g else g for g in gate],
                                                [5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]]).T, 4,
                                  nan_policy="zero", backend="reference")
    assert torch.equal(zeroed.advantages, expected.advantages)
