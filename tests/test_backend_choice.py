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


def test_triton_rejects_wrong_accumulator_sizes():
    pytest.importorskip("triton")
    if dk.unavailable_reason("triton", torch.device("cpu")) is not None:
        pytest.skip("triton interpreter not active")
    from dara_kernels.options import resolve_options

    opts = resolve_options("dara", None)
    with pytest.raises(ValueError, match="accumulators must have"):
        torch.ops.dara_triton.fused_advantage(torch.rand(8, 2), None, 4, torch.ones(2, dtype=torch.float64), None,
                                              None, None, torch.zeros(5, dtype=torch.float64),
                                              torch.zeros(4, dtype=torch.float64), opts.kernel_vector())


def test_cpu_kernel_rejects_wrong_accumulator_sizes():
    from dara_kernels.options import resolve_options

    opts = resolve_options("dara", None)
    with pytest.raises(RuntimeError, match="accumulators must have"):
        torch.ops.dara.fused_advantage(torch.rand(8, 2), None, 4, torch.ones(2, dtype=torch.float64), None, None,
                                       None, torch.zeros(5, dtype=torch.float64), torch.zeros(4, dtype=torch.float64),
                                       opts.kernel_vector())


def test_tests_run_cuda_only_backends_on_a_visible_gpu(monkeypatch):
    """The tests' device per backend (tests/backend_devices.py): with a GPU visible, Triton runs compiled on
    it (the authors'-estimator test once ran it on CPU tensors there), the CPU kernel and the oracle on the CPU."""
    from tests.backend_devices import device_for

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert {name: device_for(name) for name in ("triton", "cuda", "cpu", "reference")} == \
        {"triton": "cuda", "cuda": "cuda", "cpu": "cpu", "reference": "cpu"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_for("triton") == "cpu"


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA torch may have built the CUDA kernels")
def test_without_cuda_kernels_the_cuda_backend_says_so():
    """A CPU torch builds no CUDA kernels: _C says so (scripts/check_torch_build.sh checks the flag against the
    dispatcher in both builds), and backend="cuda" names it on a CUDA device."""
    from dara_kernels import _ops

    assert _ops.CUDA_KERNELS_COMPILED is False
    assert "built without CUDA" in dk.unavailable_reason("cuda", torch.device("cuda"))
