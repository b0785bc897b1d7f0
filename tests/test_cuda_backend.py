"""The CUDA kernels (csrc/cuda) against the float64 reference, plus what only
a GPU can show: CUDA-graph capture, bitwise determinism, bf16 inputs. Every
test here skips cleanly on a machine without a CUDA GPU."""
import pytest
import torch

import dara_kernels as dk
from dara_kernels import backends
from dara_kernels.check.cases import make_case
from dara_kernels.check.sweeps import EDGE_SWEEPS
from dara_kernels.options import resolve_options
from dara_kernels.wire import ACCUMULATOR_SEGMENTS, combined_columns, segment_offsets
from tests.compare import assert_matches, tolerance
from tests.sweep import (
    DTYPES,
    KS,
    LAYOUTS,
    edge_sweep,
    offset_sweep,
    sweep_against_reference,
)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or dk.unavailable_reason("cuda", torch.device("cuda")) is not None,
    reason="needs a CUDA GPU and dara_kernels built with CUDA")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_sweep(method, layout, k, dtype):
    assert sweep_against_reference("cuda", method, layout, k, dtype, device="cuda") > 0


@pytest.mark.parametrize("method", dk.METHODS)
def test_rewards_far_from_zero(method):
    assert offset_sweep("cuda", method, device="cuda") > 0


@pytest.mark.parametrize("name", EDGE_SWEEPS)
def test_edge_sweep(name):
    """Each of the check's edge sweeps (dara_kernels/check/sweeps.py, EDGE_SWEEPS): the calibrations, a
    batch without spread, RVPO's risk coefficients, groups without signal, reward gates, group ids."""
    assert edge_sweep("cuda", name, device="cuda") > 0


@pytest.mark.parametrize("calibration", ["positive", "symmetric"])
@pytest.mark.parametrize("k", [8, backends.backend("cuda").max_rewards])
def test_wide_rows_in_both_calibrations(k, calibration):
    """K = 8 (its own kernel) and the widest K: under positive calibration
    K + 1 combined columns, the most the per-lane arrays hold."""
    for seed, layout in enumerate(LAYOUTS):
        case = make_case(40 + seed, layout, k, shape=(104, 13) if layout == "fixed" else (97,))
        kwargs = case.kwargs(with_mask=True)
        for options in (dict(method="dara", calibration=calibration), dict(method="static", calibration=calibration),
                        dict(method="dara", calibration=calibration, batch_norm="token")):
            ref = dk.fused_advantage(case.rewards, backend="reference", **options, **kwargs)
            on_device = {key: v.cuda() if isinstance(v, torch.Tensor) else v for key, v in kwargs.items()}
            out = dk.fused_advantage(case.rewards.cuda(), backend="cuda", **options, **on_device)
            assert_matches(out, ref, tolerance("cuda", torch.float32), f"{case.label} {options}")


@pytest.mark.parametrize("calibration", ["positive", "symmetric"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_accumulate_counts_bad_rewards_like_the_cpu_kernel(calibration, layout):
    """The +-Inf and NaN counts that every rank all-reduces before it raises
    (distributed mode), at their slots for K + 1 columns under positive
    calibration; the negative lengths' slot is the Python driver's, left 0."""
    case = make_case(5, layout, 4, nan_fraction=0.1, shape=(64, 8) if layout == "fixed" else (97,))
    rewards = case.rewards.clone()
    rewards[3, 1], rewards[40, 2], rewards[41, 2] = float("inf"), float("-inf"), float("inf")
    index, group_size = case.layout.get("group_index"), case.layout.get("group_size", 0)
    weights = torch.ones(4, dtype=torch.float64)
    lengths = -torch.ones(rewards.shape[0], dtype=torch.int64)
    options = resolve_options("dara", None, calibration=calibration).kernel_vector()
    offsets = segment_offsets(ACCUMULATOR_SEGMENTS, 4, combined_columns("dara", 4, calibration == "positive"))
    expected = [3.0, float(torch.isnan(rewards).sum()), 0.0]
    for device in ("cpu", "cuda"):
        acc, _ = torch.ops.dara.accumulate(rewards.to(device), None if index is None else index.to(device),
                                           group_size, weights.to(device), None, lengths.to(device), options)
        assert acc.numel() == offsets["size"], device
        got = [acc[offsets[name]].item() for name in ("infinite_rewards", "missing_rewards", "negative_lengths")]
        assert got == expected, device


@pytest.mark.parametrize("method", ["grpo", "dara", "dvao", "saw"])
def test_given_accumulators_give_the_same_bits(method):
    """One rank's own accumulators passed back (distributed mode with one
    rank) change nothing: finalize reads them as it reads its own."""
    case = make_case(6, "shuffled", 4, nan_fraction=0.1, shape=(97,))
    rewards, index = case.rewards.cuda(), case.layout["group_index"].cuda()
    options = resolve_options(method, None).kernel_vector()
    weights = torch.ones(4, dtype=torch.float64, device="cuda")
    acc, ext = torch.ops.dara.accumulate(rewards, index, 0, weights, None, None, options)
    alone = torch.ops.dara.fused_advantage(rewards, index, 0, weights, None, None, None, None, None, options)
    given = torch.ops.dara.fused_advantage(rewards, index, 0, weights, None, None, None, acc, ext, options)
    for a, b in zip(alone, given):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_graph_capture_and_replay(backend):
    """With default arguments: the value checks step aside while capturing."""
    case = make_case(1, "fixed", 3, shape=(4096, 16))
    rewards = case.rewards.cuda()
    mask = case.mask.cuda()
    run = lambda: dk.fused_advantage(rewards, 16, response_mask=mask, batch_norm="token",  # noqa: E731
                                     backend=backend)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run()  # warm-up outside capture (Triton compiles here)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    rewards.copy_(make_case(2, "fixed", 3, shape=(4096, 16)).rewards.cuda())
    graph.replay()
    torch.cuda.synchronize()
    expected = dk.fused_advantage(rewards.cpu(), 16, response_mask=mask.cpu(), batch_norm="token",
                                  backend="reference")
    assert_matches(captured, expected, tolerance(backend, torch.float32), "graph replay")


@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bitwise_deterministic(backend, layout):
    case = make_case(3, layout, 4, shape=(1 << 16, 8) if layout == "fixed" else (1 << 16,))
    kwargs = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in case.layout.items()}
    runs = [dk.fused_advantage(case.rewards.cuda(), backend=backend, **kwargs) for _ in range(3)]
    for other in runs[1:]:
        for name in runs[0]._fields:
            if getattr(runs[0], name) is not None:
                assert torch.equal(getattr(runs[0], name), getattr(other, name)), name


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_bf16_large_batch(backend):
    gen = torch.Generator().manual_seed(0)
    rewards = (torch.rand(1 << 20, 4, generator=gen) < torch.tensor([0.02, 0.3, 0.6, 0.97])).to(torch.bfloat16)
    out = dk.fused_advantage(rewards.cuda(), 16, backend=backend)
    ref = dk.fused_advantage(rewards, 16, backend="reference")
    assert_matches(out, ref, tolerance(backend, torch.bfloat16), "bf16 1M")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_to_the_24_rows(layout):
    """2^24 rows: past every 32-bit index of a [N, K] float tensor, against the reference on the GPU."""
    n, k, g = 1 << 24, 4, 16
    gen = torch.Generator(device="cuda").manual_seed(24)
    p = torch.tensor([0.02, 0.3, 0.6, 0.97], device="cuda")
    rewards = (torch.rand(n, k, device="cuda", generator=gen) < p).float()
    if layout == "fixed":
        kwargs = {"group_size": g}
    else:
        kwargs = {"group_index": torch.randperm(n, device="cuda", generator=gen) // g}
    out = dk.fused_advantage(rewards, backend="cuda", **kwargs)
    ref = dk.fused_advantage(rewards, backend="reference", **kwargs)
    assert_matches(out, ref, tolerance("cuda", torch.float32), f"2^24 rows {layout}")


def test_binding_rejects_what_it_cannot_run():
    """K past the kernels' limit (which Python can read first) and all-reduced
    accumulators of the wrong size fail with the sizes in the message."""
    from dara_kernels.options import resolve_options

    options = resolve_options("dara", None).kernel_vector()
    limit = backends.backend("cuda").max_rewards
    too_wide = torch.rand(32, limit + 1, device="cuda")
    weights = torch.ones(limit + 1, dtype=torch.float64, device="cuda")
    with pytest.raises(RuntimeError, match=f"1 to {limit} reward columns"):
        torch.ops.dara.fused_advantage(too_wide, None, 16, weights, None, None, None, None, None, options)
    rewards = torch.rand(32, 3, device="cuda")
    accumulators, extrema = torch.ops.dara.accumulate(rewards, None, 16, weights[:3], None, None, options)
    with pytest.raises(RuntimeError, match=f"accumulators must have {accumulators.numel()} elements"):
        torch.ops.dara.fused_advantage(rewards, None, 16, weights[:3], None, None, None, accumulators[:-1], extrema,
                                       options)
