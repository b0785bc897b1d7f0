"""The CUDA kernels (csrc/cuda) against the float64 reference, plus what only
a GPU can show: CUDA-graph capture, bitwise determinism, bf16 inputs. Every
test here skips cleanly on a machine without a CUDA GPU."""
import pytest
import torch

import dara_kernels as dk
from dara_kernels.wire import MAX_REWARDS
from tests.cases import make_case
from tests.compare import TOLERANCES, assert_matches
from tests.sweep import DTYPES, KS, LAYOUTS, sweep_against_reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or dk.unavailable_reason("cuda", torch.device("cuda")) is not None,
    reason="needs a CUDA GPU and dara_kernels built with CUDA")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_sweep(method, layout, k, dtype):
    assert sweep_against_reference("cuda", method, layout, k, dtype, device="cuda") > 0


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
    assert_matches(captured, expected, TOLERANCES[backend][torch.float32], "graph replay")


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
    assert_matches(out, ref, TOLERANCES[backend][torch.bfloat16], "bf16 1M")


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
    assert_matches(out, ref, TOLERANCES["cuda"][torch.float32], f"2^24 rows {layout}")


def test_binding_rejects_what_it_cannot_run():
    """K past the kernels' limit (which Python can read first) and all-reduced
    accumulators of the wrong size fail with the sizes in the message."""
    from dara_kernels.options import resolve_options

    options = resolve_options("dara", None).kernel_vector()
    limit = MAX_REWARDS["cuda"]
    too_wide = torch.rand(32, limit + 1, device="cuda")
    weights = torch.ones(limit + 1, dtype=torch.float64, device="cuda")
    with pytest.raises(RuntimeError, match=f"1 to {limit} reward columns"):
        torch.ops.dara.fused_advantage(too_wide, None, 16, weights, None, None, None, None, None, options)
    rewards = torch.rand(32, 3, device="cuda")
    accumulators, extrema = torch.ops.dara.accumulate(rewards, None, 16, weights[:3], None, None, options)
    with pytest.raises(RuntimeError, match=f"accumulators must have {accumulators.numel()} elements"):
        torch.ops.dara.fused_advantage(rewards, None, 16, weights[:3], None, None, None, accumulators[:-1], extrema,
                                       options)
