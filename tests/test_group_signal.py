"""Which groups carry signal (docs/spec.md#group-signal) against an
implementation written from the definitions, and no_signal="zero": a group
without signal gets advantage 0 and leaves the batch statistics, as if it had
been filtered out."""
import math

import pytest
import torch

import dara_kernels as dk
from dara_kernels import wire
from dara_kernels.check.cases import signal_rewards

BACKENDS = ["reference"] + (["cpu"] if dk.extension_available() else [])


def varies(values, tol=1e-6):
    """The sample std of the values over tol, as a reward is active (two values at least)."""
    if len(values) < 2:
        return False
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) > tol


def from_definitions(rewards, group, weights):
    """Per group: (some reward varies over its present entries, the weighted sum over the present entries varies
    over the rows with one)."""
    flags = []
    for g0 in range(0, rewards.shape[0], group):
        rows = rewards[g0:g0 + group].tolist()
        any_active = any(varies([r[k] for r in rows if r[k] == r[k]]) for k in range(rewards.shape[1]))
        sums = [sum(w * x for w, x in zip(weights, r) if x == x) for r in rows if any(x == x for x in r)]
        flags.append((any_active, varies(sums)))
    return flags


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_flags_and_counts_match_the_definitions(backend, seed):
    rewards = signal_rewards(torch.Generator().manual_seed(seed), 64)
    weights = [1.0, 1.0, 1.0, 0.5]
    flags = from_definitions(rewards, 4, weights)
    out = dk.fused_advantage(rewards.float(), 4, method="gdpo", reward_weights=weights, backend=backend)
    assert out.informative.tolist() == [a for a, _ in flags for _ in range(4)]
    assert out.sum_informative.tolist() == [s for _, s in flags for _ in range(4)]
    assert int(out.informative_groups) == sum(a for a, _ in flags)
    assert int(out.sum_informative_groups) == sum(s for _, s in flags)
    assert int(out.conflict_groups) == sum(a and not s for a, s in flags)
    assert not flags[0][0] and flags[1] == (True, False)  # the perfect group; the constant-sum one


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_zero_gives_a_group_without_signal_nothing(backend, method):
    """The perfect group (rows 0-3) gets exactly 0, the others the advantages of the batch without it; SAW's
    and SA-MRPO's weights still read the whole batch's raw moments (docs/spec.md#group-signal)."""
    rewards = signal_rewards(torch.Generator().manual_seed(7), 64).float()
    out = dk.fused_advantage(rewards, 4, method=method, no_signal="zero", backend=backend)
    assert torch.equal(out.advantages[:4], torch.zeros(4))
    if wire.METHOD_TRAITS[method].raw_extremes:
        return
    without = dk.fused_advantage(rewards[4:], 4, method=method, backend=backend)
    torch.testing.assert_close(out.advantages[4:], without.advantages, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.batch_mean, without.batch_mean, rtol=1e-5, atol=1e-6)


def test_positive_calibration_pushes_a_group_without_signal_unless_zero():
    """The issue's batch: 64 groups of 4, one perfect on every reward. Under DARA-Asym the batch mean of s is
    positive and "keep" shifts the perfect group's rows below 0; GDPO's is 0 by construction."""
    gen = torch.Generator().manual_seed(0)
    n = 256
    rewards = torch.stack([torch.rand(n, generator=gen) < 0.4, torch.rand(n, generator=gen) < 0.03,
                           torch.rand(n, generator=gen) < 0.6], 1).float()
    rewards[:4] = 1.0
    dara = dk.fused_advantage(rewards, 4, method="dara", backend="reference")
    assert dara.batch_mean > 0 and (dara.advantages[:4] < 0).all()
    gdpo = dk.fused_advantage(rewards, 4, method="gdpo", backend="reference")
    torch.testing.assert_close(gdpo.advantages[:4], torch.zeros(4), rtol=0, atol=1e-6)
    zero = dk.fused_advantage(rewards, 4, method="dara", no_signal="zero", backend="reference")
    assert torch.equal(zero.advantages[:4], torch.zeros(4))


def test_grpo_s_signal_is_its_summed_reward():
    """A constant-sum group has GRPO advantage 0 either way; "zero" takes it out of the batch statistics."""
    rewards = signal_rewards(torch.Generator().manual_seed(1), 64).float()
    keep = dk.fused_advantage(rewards, 4, method="grpo", batch_norm="response", backend="reference")
    zero = dk.fused_advantage(rewards, 4, method="grpo", batch_norm="response", no_signal="zero",
                              backend="reference")
    assert torch.equal(zero.advantages[4:8], torch.zeros(4)) and keep.advantages[4:8].abs().max() < 1e-6
    assert keep.batch_std != zero.batch_std


def test_no_signal_takes_keep_or_zero():
    assert dk.resolve_options("dara", None).no_signal == "keep"
    assert dk.resolve_options("gdpo", "verl").no_signal == "keep"
    with pytest.raises(ValueError, match="no_signal='drop' is not supported"):
        dk.resolve_options("dara", None, no_signal="drop")
