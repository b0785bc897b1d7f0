"""Choosing a backend never surprises: limits are known before any kernel
runs, auto picks one that can run the call, and nothing falls back silently."""
import pytest
import torch

import dara_kernels as dk
from dara_kernels import backends


@pytest.mark.parametrize("backend", ["cpu", "cuda", "triton"])
def test_limits_are_reported_before_launch(backend):
    reason = dk.unavailable_reason(backend, torch.device("cuda" if backend == "cuda" else "cpu"),
                                   backends.backend(backend).max_rewards + 1)
    assert reason is not None
    if backend == "cpu":
        assert str(backends.backend("cpu").max_rewards) in reason


def test_auto_names_the_limit_instead_of_a_kernel_error():
    rewards = torch.rand(16, backends.backend("cpu").max_rewards + 1)
    limit = backends.backend("cpu").max_rewards
    with pytest.raises(dk.BackendUnavailable, match=f"at most {limit} reward columns"):
        dk.fused_advantage(rewards, 4)
    out = dk.fused_advantage(rewards, 4, backend="reference")
    assert out.advantages.shape == (16,)


def test_explicit_backend_over_its_limit_raises():
    with pytest.raises(dk.BackendUnavailable, match="at most"):
        dk.fused_advantage(torch.rand(8, backends.backend("cpu").max_rewards + 1), 4, backend="cpu")


def test_at_the_limit_the_kernel_runs():
    rewards = torch.rand(16, backends.backend("cpu").max_rewards)
    out = dk.fused_advantage(rewards, 4, method="gdpo")
    ref = dk.fused_advantage(rewards, 4, method="gdpo", backend="reference")
    torch.testing.assert_close(out.advantages, ref.advantages, atol=1e-5, rtol=1e-5)


def test_triton_rejects_wrong_reduce_sizes():
    pytest.importorskip("triton")
    if dk.unavailable_reason("triton", torch.device("cpu")) is not None:
        pytest.skip("triton interpreter not active")
    from dara_kernels.options import resolve_options
    from dara_kernels.triton.fused import fused_advantage_triton
    from dara_kernels.validation import prepare_inputs

    inputs = prepare_inputs(torch.rand(8, 2), group_size=4, group_index=None, reward_weights=None,
                            response_mask=None, response_lengths=None, reward_bounds=None, nan_policy="ignore",
                            batch_norm="response", validate=True)
    def wrong_sizes(acc, ext):
        return torch.zeros(5, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)

    with pytest.raises(ValueError, match="accumulators of"):
        fused_advantage_triton(inputs, resolve_options("dara", None), wrong_sizes)


def test_cpu_kernel_rejects_wrong_accumulator_sizes():
    from dara_kernels.options import resolve_options

    opts = resolve_options("dara", None)
    with pytest.raises(RuntimeError, match="accumulators must have"):
        torch.ops.dara.fused_advantage(torch.rand(8, 2), None, 4, torch.ones(2, dtype=torch.float64), None, None,
                                       None, torch.zeros(5, dtype=torch.float64), torch.zeros(4, dtype=torch.float64),
                                       opts.kernel_vector())
