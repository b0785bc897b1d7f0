"""Bad inputs raise the documented error naming the argument; inputs are never modified."""
import pytest
import torch

import dara_kernels as dk

R = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])

BAD = [
    (dict(rewards=R.to(torch.complex64), group_size=2), TypeError, "rewards"),
    (dict(rewards=R.unsqueeze(0), group_size=2), ValueError, "rewards"),
    (dict(rewards=R, group_size=3), ValueError, "group_size"),
    (dict(rewards=R, group_size=0), ValueError, "group_size"),
    (dict(rewards=R, group_size=2.0), TypeError, "group_size"),
    (dict(rewards=R), ValueError, "group_size or group_index"),
    (dict(rewards=R, group_size=2, group_index=torch.zeros(4, dtype=torch.long)), ValueError, "exactly one"),
    (dict(rewards=R, group_index=torch.zeros(3, dtype=torch.long)), ValueError, "group_index"),
    (dict(rewards=R, group_index=torch.zeros(4)), TypeError, "group_index"),
    (dict(rewards=R.clone().index_put_((torch.tensor([1]), torch.tensor([0])), torch.tensor(float("inf"))), group_size=2), ValueError, "Inf"),
    (dict(rewards=R.clone().index_put_((torch.tensor([2]), torch.tensor([1])), torch.tensor(float("nan"))), group_size=2, nan_policy="raise"), ValueError, "row 2, column 1"),
    (dict(rewards=R, group_size=2, response_lengths=torch.tensor([1, -1, 2, 3])), ValueError, "response_lengths"),
    (dict(rewards=R, group_size=2, response_mask=torch.ones(3, 5)), ValueError, "response_mask"),
    (dict(rewards=R, group_size=2, response_mask=torch.ones(4, 5), response_lengths=torch.ones(4)), ValueError, "not both"),
    (dict(rewards=R, group_size=2, batch_norm="token"), ValueError, "token"),
    (dict(rewards=R, group_size=2, reward_weights=[1.0]), ValueError, "reward_weights"),
    (dict(rewards=R, group_size=2, reward_bounds=[(0, 1)]), ValueError, "reward_bounds"),
    (dict(rewards=R, group_size=2, reward_bounds=[(1, 0), (0, 1)]), ValueError, "reward_bounds"),
    (dict(rewards=R, group_size=2, method="ppo"), ValueError, "method"),
    (dict(rewards=R, group_size=2, preset="openrlhf"), ValueError, "preset"),
    (dict(rewards=R, group_size=2, batch_norm="group"), ValueError, "batch_norm"),
    (dict(rewards=R, group_size=2, nan_policy="drop"), ValueError, "nan_policy"),
    (dict(rewards=R, group_size=2, eps=-1.0), ValueError, "eps"),
    (dict(rewards=R, group_size=2, alpha=float("nan")), ValueError, "alpha"),
    (dict(rewards=R, group_size=2, density_floor=2.0), ValueError, "density_floor"),
    (dict(rewards=R, group_size=2, unbiased=1), TypeError, "unbiased"),
    (dict(rewards=R, group_size=2, singleton="one"), ValueError, "singleton"),
    (dict(rewards=R, group_size=2, backend="tpu"), ValueError, "backend"),
    (dict(rewards=[[1.0]], group_size=1), TypeError, "rewards"),
    (dict(rewards=R, group_size=2, reward_gates={0: 0}), ValueError, "cannot gate itself"),
    (dict(rewards=R, group_size=2, reward_gates={"b": "a"}), ValueError, "pass reward_names"),
    (dict(rewards=R, group_size=2, reward_gates={"b": "c"}, reward_names=["a", "b"]), ValueError, "no reward named"),
    (dict(rewards=R, group_size=2, reward_gates={1: 2}), ValueError, "out of range for K=2"),
    (dict(rewards=R, group_size=2, reward_gates={1: -1}), ValueError, "negative"),
    (dict(rewards=R, group_size=2, reward_gates={0: 1, 1: 0}), ValueError, "gate each other"),
    (dict(rewards=torch.ones(4, 3), group_size=2, reward_gates={0: 1, 1: 2, 2: 0}), ValueError, "cycle: '0' -> '1'"),
    (dict(rewards=torch.ones(4, 3), group_size=2, reward_gates={"c": "b", "b": "a"}, reward_names=["a", "b", "c"]),
     ValueError, "no chains"),
    (dict(rewards=R, group_size=2, reward_gates={0: 1, "a": 1}, reward_names=["a", "b"]), ValueError, "two gates"),
    (dict(rewards=R, group_size=2, reward_gates=[0, 1]), TypeError, "reward_gates"),
    (dict(rewards=R, group_size=2, reward_gates={0.0: 1}), TypeError, "reward_gates"),
    (dict(rewards=R, group_size=2, reward_names=["a"]), ValueError, "reward_names must name each of the K=2"),
    (dict(rewards=R, group_size=2, reward_names=["a", "a"]), ValueError, "repeat"),
    (dict(rewards=R, group_size=2, reward_names="ab"), TypeError, "reward_names"),
]


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("kwargs,error,needle", BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_raises(kwargs, error, needle, backend):
    """The CPU kernel checks for Inf itself; every other check is Python's, for either backend."""
    if backend == "cpu" and not dk.extension_available():
        pytest.skip("extension not built")
    kwargs = dict(kwargs)
    kwargs.setdefault("backend", backend)
    before = {k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(error, match=needle):
        dk.fused_advantage(**kwargs)
    for k, v in before.items():
        assert torch.equal(kwargs[k], v) or (torch.isnan(v).any() and torch.equal(kwargs[k].isnan(), v.isnan()))


@pytest.mark.parametrize("good,bad", [(dict(reward_gates={0: 1}), dict(reward_gates={0.0: 1})),
                                      (dict(reward_gates={1: 0}), dict(reward_gates={True: 0})),
                                      (dict(unbiased=True), dict(unbiased=1))])
def test_a_checked_value_does_not_pass_a_bad_equal_one(good, bad):
    """Options are resolved once per distinct set: a value equal as a key to one already resolved (0.0 and 0,
    1 and True, also inside a mapping) is still checked."""
    dk.fused_advantage(R, 2, backend="reference", **good)
    with pytest.raises(TypeError):
        dk.fused_advantage(R, 2, backend="reference", **bad)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_inputs_unchanged(backend):
    if backend == "cpu" and not dk.extension_available():
        pytest.skip("extension not built")
    rewards = R.clone()
    rewards[0, 0] = float("nan")
    copy = rewards.clone()
    mask = torch.ones(4, 3, dtype=torch.bool)
    dk.fused_advantage(rewards, 2, nan_policy="zero", response_mask=mask, batch_norm="token", backend=backend)
    assert torch.equal(rewards.isnan(), copy.isnan())
    assert torch.equal(torch.nan_to_num(rewards), torch.nan_to_num(copy))
    assert mask.all()


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_an_inf_is_reported_before_a_nan_under_raise(backend):
    """nan_policy="raise" reads the rewards in Python even where the CPU kernel checks for +-Inf itself, and
    reports the Inf first."""
    rewards = R.clone()
    rewards[0, 1], rewards[2, 0] = float("nan"), float("inf")
    with pytest.raises(ValueError, match="contains \\+-Inf at index \\(2, 0\\)"):
        dk.fused_advantage(rewards, 2, nan_policy="raise", backend=backend)


def test_one_dimensional_rewards_mean_one_column():
    out = dk.fused_advantage(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, backend="reference")
    assert out.density.shape == (1,)


def test_unavailable_backend_says_why():
    with pytest.raises(dk.BackendUnavailable, match="CUDA"):
        dk.fused_advantage(R, 2, backend="cuda")


def test_process_group_needs_kernel_backend():
    with pytest.raises(dk.BackendUnavailable, match="kernel backend"):
        dk.fused_advantage(R, 2, backend="reference", process_group=object())


def test_nan_guard_is_active():
    """The conftest's NaN fill is what makes unwritten outputs visible."""
    assert torch.isnan(torch.empty(8)).all()


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_equal_reward_bounds_are_valid(backend):
    """lo == hi is allowed (docs/spec.md#inputs: only lo > hi is an error): SA-MRPO's saturation is then 0."""
    if backend == "cpu" and not dk.extension_available():
        pytest.skip("extension not built")
    out = dk.fused_advantage(R, 2, method="sa_mrpo", reward_bounds=[(1.0, 1.0), (0.0, 1.0)], backend=backend)
    assert out.weights[0].item() == 1.0
