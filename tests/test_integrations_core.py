"""The integrations' shared core without any trainer library: the settings check, the one op call (padding
left out and put back), the group-signal decision with and without singletons, the sampling metrics and the
patch helper. Each framework's suite (tests/integrations) runs the same core through its framework."""
import math
import types

import pytest
import torch

import dara_kernels as dk
from dara_kernels.group_signal import Sampling
from dara_kernels.integrations import patching
from dara_kernels.integrations.core import KEYWORDS, Honoured, advantages, configure, estimator_run
from dara_kernels.integrations.groups import decide
from dara_kernels.wire import OPTION_NAMES


def test_every_option_of_the_table_reaches_the_op():
    """A keyword added to wire.OPTIONS and fused_advantage is a user option of every framework unedited."""
    assert set(OPTION_NAMES) <= KEYWORDS
    assert {"preset", "reward_bounds", "backend", "validate"} <= KEYWORDS


@pytest.mark.parametrize("method,options,error,match", [
    ("gdpo", {"calibration": "positive"}, ValueError, r"^cfg\.opts: calibration applies to"),
    ("dara", {"alpha": "x"}, TypeError, r"^cfg\.opts: alpha must be a real number"),
    ("dara", {"group_size": 4}, ValueError, r"cfg\.opts may not set \['group_size'\]"),
    ("dara", {"alpah": 1.0}, ValueError, r"cfg\.opts: \['alpah'\] are not fused_advantage keywords"),
    ("nope", {}, ValueError, r"cfg\.opts: method 'nope' is not one of grpo, gdpo"),
])
def test_settings_are_checked_with_the_setting_named(method, options, error, match):
    with pytest.raises(error, match=match):
        configure(method, options, "cfg.opts")


def test_user_options_override_the_framework_defaults():
    s = configure("dara", {"eps": 1e-3}, "here", defaults={"preset": "verl", "eps": 1e-6})
    assert s.options == {"preset": "verl", "eps": 1e-3}


def test_reward_gates_by_component_name():
    """verl's and SkyRL's reward keys name the columns: a gate by key needs no reward_names; a name that is
    not a key stops the launch, with the setting named."""
    run = estimator_run("dara", {"reward_gates": {"length": "acc"}}, ["acc", "length"], None, "cfg.opts", "keys")
    assert run.settings.options["reward_names"] == ("acc", "length")
    rewards = torch.tensor([[1.0, 0.5], [0.0, 0.9], [1.0, 0.2], [0.0, 0.7]])
    gated = advantages(run.settings, rewards, group_size=2).advantages
    by_hand = dk.fused_advantage(torch.tensor([[1.0, 0.5], [0.0, 0.0], [1.0, 0.2], [0.0, 0.0]]), 2)
    assert torch.equal(gated, by_hand.advantages)
    with pytest.raises(ValueError, match=r"^cfg\.opts: reward_gates: no reward named 'format'"):
        estimator_run("dara", {"reward_gates": {"format": "acc"}}, ["acc", "length"], None, "cfg.opts", "keys")


def test_padding_rows_are_left_out_and_get_zero():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(10, 2, generator=gen)
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3])
    mask = torch.ones(10, 3)
    padding = torch.zeros(10, dtype=torch.bool)
    padding[9] = True
    s = configure("dara", {}, "here")
    result = advantages(s, rewards, group_index=groups, response_mask=mask, padding=padding)
    direct = dk.fused_advantage(rewards[:9], group_index=groups[:9], response_mask=mask[:9])
    assert torch.equal(result.advantages[:9], direct.advantages) and result.advantages[9] == 0
    assert torch.equal(result.token_advantages[:9], direct.token_advantages)
    assert result.token_advantages[9].abs().max() == 0
    assert torch.equal(result.output.density, direct.density)


def groups_batch():
    """Groups: a varying sum; rewards that trade off at a constant sum; nothing varies; one row; two rows
    (varying)."""
    rows = [[1, 0], [0, 0], [1, 0], [0, 1], [1, 1], [1, 1], [1, 0], [1, 0], [0, 0]]
    uids = ["v", "v", "c", "c", "u", "u", "one", "two", "two"]
    return torch.tensor(rows, dtype=torch.float32), uids


@pytest.mark.parametrize("criterion,singletons,kept", [
    ("any", False, [True, True, False, False, True]),
    ("any", True, [True, True, False, True, True]),
    ("sum", False, [True, False, False, False, True]),
    ("sum", True, [True, False, False, True, True]),
])
def test_decision_by_criterion_and_singleton_rule(criterion, singletons, kept):
    rewards, uids = groups_batch()
    signal = decide(configure("dara", {}, "here"), rewards, uids, criterion)
    assert signal.rows.tolist() == [2, 2, 2, 1, 2]
    assert signal.keep(singletons).tolist() == kept
    assert signal.keep_rows(singletons).tolist() == [kept[g] for g in signal.group_of_row.tolist()]


def test_the_sum_criterion_decides_on_the_weighted_sum():
    """The advantages weight the rewards; so does the filter: accuracy and format trade off at a constant
    1 * accuracy + 0.5 * format (the unweighted sum varies), so `sum` drops the group, `any` keeps it."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 0.0], [0.0, 2.0], [1.0, 0.0], [0.0, 0.0]])
    uids = ["trade", "trade", "trade", "trade", "varies", "varies"]
    settings = configure("gdpo", {}, "here")
    assert decide(settings, rewards, uids, "sum", [1.0, 0.5]).signal.tolist() == [False, True]
    assert decide(settings, rewards, uids, "sum").signal.tolist() == [True, True]
    assert decide(settings, rewards, uids, "any", [1.0, 0.5]).signal.tolist() == [True, True]


@pytest.mark.parametrize("options", [{"preset": "verl"}, {"batch_norm": "token"}])
def test_a_filter_decides_under_token_normalisation(options):
    """A filter has no response mask; under batch_norm="token" (preset="verl", verl's and the authors' setup)
    its call still needs token weights, which do not change the flags."""
    rewards, uids = groups_batch()
    token = decide(configure("dara", options, "here"), rewards, uids, "any")
    assert token.signal.tolist() == decide(configure("dara", {}, "here"), rewards, uids, "any").signal.tolist()


def test_framework_settings_join_the_options():
    """The keywords, lowest first: the framework's defaults (dropped for a preset of the user's), its honoured
    settings, the user's options; a setting away from its default and an option that says otherwise stop."""
    honoured = [Honoured("cfg.norm", False, {"scale_by_std": False}, default=False)]
    s = configure("grpo", {"eps": 1e-3}, "opts", defaults={"eps": 1e-4, "batch_norm": "none"}, honoured=honoured)
    assert s.options == {"eps": 1e-3, "batch_norm": "none", "scale_by_std": False}
    s = configure("grpo", {"preset": "verl"}, "opts", defaults={"eps": 1e-4}, honoured=honoured)
    assert s.options == {"preset": "verl", "scale_by_std": False}
    with pytest.raises(ValueError, match=r"^cfg\.norm=False means scale_by_std=False, but opts sets scale_by_std=True"):
        configure("grpo", {"scale_by_std": True}, "opts", honoured=honoured)
    at_default = [Honoured("cfg.norm", True, {"scale_by_std": True}, default=True)]
    assert configure("grpo", {"scale_by_std": False}, "opts", honoured=at_default).options["scale_by_std"] is False


@pytest.mark.parametrize("norm", [True, False])
def test_a_framework_setting_reaches_the_advantages(norm):
    """verl's norm_adv_by_std_in_grpo and SkyRL's grpo_norm_by_std reach the op through estimator_run: the
    advantages are the frameworks' own grpo by hand (the weighted sum less its group mean, over the group's
    sample std + 1e-6 unless the setting is off), so a drop-in that ignored the setting fails here."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.0, 0.0],
                            [1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    weights = [1.0, 0.5]
    honoured = [Honoured("cfg.norm", norm, {"scale_by_std": norm}, default=norm)]
    run = estimator_run("dara", {"method": "grpo"}, ["acc", "fmt"], weights, "cfg.opts", "keys",
                        defaults={"batch_norm": "none"}, honoured=honoured)
    got = advantages(run.settings, rewards, group_size=4, reward_weights=run.weights).advantages
    summed = (rewards @ torch.tensor(weights)).view(2, 4)
    centred = summed - summed.mean(dim=1, keepdim=True)
    expected = centred / (summed.std(dim=1, keepdim=True) + 1e-6) if norm else centred
    torch.testing.assert_close(got, expected.flatten())


def test_decision_reads_the_settings():
    rewards = torch.tensor([[0.5], [0.501], [0.5], [0.501]])
    uids = ["a", "a", "b", "b"]
    assert decide(configure("dara", {}, "here"), rewards, uids, "any").signal.tolist() == [True, True]
    assert decide(configure("dara", {"active_tol": 0.01}, "here"), rewards, uids, "any").signal.tolist() == \
        [False, False]


@pytest.mark.parametrize("criterion,discarded", [("any", 0), ("sum", 2)])
def test_sampling_metrics(criterion, discarded):
    rewards, uids = groups_batch()
    settings = configure("dara", {}, "here")
    sampling = Sampling(criterion)
    for _ in range(2):
        signal = decide(settings, rewards, uids, criterion)
        sampling.add_signal(signal, signal.keep(False))
    kept = 2 * int(signal.keep(False).sum())
    assert sampling.metrics(trained_responses=6, prefix="p/") == {
        "p/rounds": 2, "p/acceptance_rate": kept / 10, "p/generation_overhead": 18 / 6,
        "p/informative_groups_discarded": discarded, "p/reverse_conflict_rate": 2 / 10}
    assert sampling.metrics(trained_responses=0)["dara/sampling/generation_overhead"] == math.inf


class Base:
    def method(self, x):
        return x + 1


class Child(Base):
    pass


def test_patch_helper_installs_once_and_uninstalls():
    module = types.SimpleNamespace(f=lambda x: x * 2)
    original_f = module.f
    patches = [patching.Patch(module, "f", lambda original: lambda x: original(x) + 1),
               patching.Patch(Child, "method", lambda original: lambda self, x: original(self, x) * 10)]
    patching.install(patches)
    patching.install(patches)  # idempotent
    assert module.f(3) == 7 and Child().method(1) == 20 and Base().method(1) == 2
    assert patching.is_patched(module, "f") and patching.is_patched(Child, "method")
    patching.uninstall(patches)
    assert module.f is original_f and "method" not in vars(Child) and Child().method(1) == 2
    patching.uninstall(patches)  # idempotent: nothing installed, nothing to put back
    assert module.f is original_f and "method" not in vars(Child) and Child().method(1) == 2
    with patching.patched(patches[:1]):
        assert module.f(3) == 7
    assert module.f is original_f
