"""The fused CPU kernel against the float64 reference. The edge sweeps
(dara_kernels/check/sweeps.py: rewards far from zero, the calibrations,
groups without signal, RVPO's coefficients, a batch without spread, reward
gates) run on
it in tests/test_check.py, through `python -m dara_kernels.check`."""
import pytest
import torch

import dara_kernels as dk
from dara_kernels.check.cases import make_case
from tests.compare import assert_matches, tolerance
from tests.sweep import DTYPES, KS, LAYOUTS, sweep_against_reference

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_sweep(method, layout, k, dtype):
    assert sweep_against_reference("cpu", method, layout, k, dtype) > 0


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_sweep_without_missing_rewards(method, layout, k):
    """Groups with every entry present take the kernel's one-pass path."""
    assert sweep_against_reference("cpu", method, layout, k, torch.float32, nan_policies=("ignore",),
                                   nan_fraction=0.0) > 0


@pytest.mark.parametrize("method", dk.METHODS)
@pytest.mark.parametrize("preset", ["trl", "verl"])
def test_presets_match_reference(method, preset):
    case = make_case(3, "shuffled", 3, shape=(97,))
    kw = case.kwargs(with_mask=True)
    ref = dk.fused_advantage(case.rewards, method=method, preset=preset, backend="reference", **kw)
    out = dk.fused_advantage(case.rewards, method=method, preset=preset, backend="cpu", **kw)
    assert_matches(out, ref, tolerance("cpu", torch.float32), preset)


@pytest.mark.parametrize("options", [
    dict(scale_by_std=False), dict(unbiased=False), dict(alpha=1.0, density_floor=0.2),
    dict(apply_query_scale=False), dict(singleton="verl"), dict(eps=0.0), dict(active_tol=0.5),
    dict(saw_delta=0.5), dict(sa_gamma=2.0),
])
@pytest.mark.parametrize("method", dk.METHODS)
def test_options(method, options):
    case = make_case(11, "shuffled", 4, shape=(97,))
    ref = dk.fused_advantage(case.rewards, method=method, backend="reference", **options, **case.layout)
    out = dk.fused_advantage(case.rewards, method=method, backend="cpu", **options, **case.layout)
    assert_matches(out, ref, tolerance("cpu", torch.float32), str(options))


def test_sparse_binary_large_batch():
    gen = torch.Generator().manual_seed(5)
    rewards = (torch.rand(4096 * 8, 4, generator=gen) < torch.tensor([0.02, 0.3, 0.6, 0.97])).float()
    ref = dk.fused_advantage(rewards, 8, backend="reference")
    out = dk.fused_advantage(rewards, 8, backend="cpu")
    assert_matches(out, ref, tolerance("cpu", torch.float32), "large")


def test_dense_and_sparse_ids_agree():
    """Ids keyed by their offset from the smallest and ids keyed by their
    rank give one answer, and so does the contiguous layout."""
    case = make_case(2, "fixed", 3, shape=(104, 13))
    groups = torch.arange(104) // 13
    dense = dk.fused_advantage(case.rewards, group_index=groups, backend="cpu")
    sparse = dk.fused_advantage(case.rewards, group_index=groups * (2 ** 40) - 2 ** 50, backend="cpu")
    fixed = dk.fused_advantage(case.rewards, group_size=13, backend="cpu")
    for a, b in ((dense, sparse), (dense, fixed)):
        for name in a._fields:
            if getattr(a, name) is not None:
                assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("method", ["dara", "grpo", "dvao", "gd2po_hard"])
@pytest.mark.parametrize("batch_norm", [None, "token"])
def test_dense_ids_with_gaps(method, batch_norm):
    """Ids close enough together to key by their offset but with values no
    row has (keys with no group), shuffled, uneven groups, a NaN group: the
    reference's answer, and bit for bit the rank-keyed layout's (the same ids
    spread out)."""
    gen = torch.Generator().manual_seed(21)
    sizes = torch.randint(1, 12, (300,), generator=gen)
    ids = torch.repeat_interleave(torch.arange(300) * 3 - 7, sizes)
    perm = torch.randperm(ids.numel(), generator=gen)
    ids = ids[perm]
    rewards = (torch.rand(ids.numel(), 4, generator=gen) < torch.tensor([0.1, 0.4, 0.7, 1.0])).float()
    rewards[ids == 2, 1] = float("nan")
    lengths = torch.randint(1, 50, (ids.numel(),), generator=gen).float()
    kw = dict(method=method, batch_norm=batch_norm, response_lengths=lengths if batch_norm else None)
    ref = dk.fused_advantage(rewards, group_index=ids, backend="reference", **kw)
    dense = dk.fused_advantage(rewards, group_index=ids, backend="cpu", **kw)
    sparse = dk.fused_advantage(rewards, group_index=ids * (2 ** 40), backend="cpu", **kw)
    assert_matches(dense, ref, tolerance("cpu", torch.float32), method)
    for name in dense._fields:
        if getattr(dense, name) is not None:
            assert torch.equal(getattr(dense, name), getattr(sparse, name)), name


def test_empty_batch():
    out = dk.fused_advantage(torch.empty(0, 3), 4, backend="cpu")
    assert out.advantages.shape == (0,) and out.keep.shape == (0,)
    assert out.density.tolist() == [0.0, 0.0, 0.0] and int(out.num_groups) == 0


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64])
def test_bool_and_integer_rewards_are_cast_once(dtype):
    """Reward functions' pass/fail flags and counts: the same answer as the float32 rewards."""
    gen = torch.Generator().manual_seed(8)
    rewards = torch.randint(0, 2 if dtype == torch.bool else 5, (96, 3), generator=gen).to(dtype)
    out = dk.fused_advantage(rewards, 8, method="dara", backend="cpu")
    expected = dk.fused_advantage(rewards.float(), 8, method="dara", backend="cpu")
    assert torch.equal(out.advantages, expected.advantages)


@pytest.mark.parametrize("holes", [False, True], ids=["prefix", "holes"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int64, torch.float32, torch.float64])
def test_token_output_reads_the_mask_in_its_dtype(dtype, holes):
    """Prefix masks (response then padding) are written from their lengths; others from the mask."""
    case = make_case(6, "shuffled", 3, shape=(97,))
    lengths = torch.randint(0, 12, (97,), generator=torch.Generator().manual_seed(2))
    mask = torch.arange(11)[None, :] < lengths[:, None]
    if holes:
        mask &= torch.arange(11)[None, :] % 3 != 1
    mask = mask.to(dtype)
    out = dk.fused_advantage(case.rewards, method="gdpo", preset="verl", response_mask=mask, backend="cpu",
                             **case.layout)
    ref = dk.fused_advantage(case.rewards, method="gdpo", preset="verl", response_mask=mask.double(),
                             backend="reference", **case.layout)
    assert_matches(out, ref, tolerance("cpu", torch.float32), str(dtype))
    assert torch.equal(out.token_advantages, out.advantages[:, None] * mask)


@pytest.mark.parametrize("rows", [8192 * 4, 1 << 17])
def test_bitwise_identical_for_any_thread_count(rows):
    """The larger call is split across threads (small calls stay on one)."""
    case = make_case(9, "fixed", 4, shape=(rows, 4))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = dk.fused_advantage(case.rewards, **case.layout, backend="cpu")
        torch.set_num_threads(max(2, threads))
        many = dk.fused_advantage(case.rewards, **case.layout, backend="cpu")
    finally:
        torch.set_num_threads(threads)
    for name in one._fields:
        if getattr(one, name) is not None:
            assert torch.equal(getattr(one, name), getattr(many, name)), name


@pytest.mark.parametrize("group_size", [1, 2, 16, 33, 100])
@pytest.mark.parametrize("method", ["dara", "grpo", "dvao"])
@pytest.mark.parametrize("k", [3, 4])
def test_three_and_four_float_rewards_complete_groups(k, method, group_size):
    """Complete groups (every entry present) of sizes that leave 0 to 3 rows
    past the last whole block of the row pass's four lanes."""
    gen = torch.Generator().manual_seed(group_size)
    scales = torch.tensor([1.0, 0.1, 3.0, 0.5])[:k]
    rewards = torch.randn(group_size * 40, k, generator=gen) * scales + 2.0
    mask = torch.rand(group_size * 40, 9, generator=gen) < 0.7
    for kw in (dict(), dict(preset="verl", response_mask=mask)):
        ref = dk.fused_advantage(rewards, group_size, method=method, backend="reference", **kw)
        out = dk.fused_advantage(rewards, group_size, method=method, backend="cpu", **kw)
        assert_matches(out, ref, tolerance("cpu", torch.float32), f"{method} {kw.keys()}")


def test_dropped_rows_stay_zero_when_the_batch_scale_is_infinite():
    """bn_eps=0 and no kept row: the batch scale is 1/0; dropped rows are still exactly 0."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    out = dk.fused_advantage(rewards, 2, method="gd2po_hard", bn_eps=0.0, backend="cpu")
    ref = dk.fused_advantage(rewards, 2, method="gd2po_hard", bn_eps=0.0, backend="reference")
    assert not out.keep.any()
    assert torch.equal(out.advantages, torch.zeros(4)) and torch.equal(ref.advantages, torch.zeros(4))


def _with_inf(rewards: torch.Tensor, *cells) -> torch.Tensor:
    rewards = rewards.clone()
    for (row, col), value in zip(cells, (float("inf"), float("-inf"))):
        rewards[row, col] = value
    return rewards


@pytest.mark.parametrize("nan_row", [None, 5], ids=["complete", "with-nan"])
@pytest.mark.parametrize("method", ["dara", "gd2po_hard"])
@pytest.mark.parametrize("layout", ["fixed", "shuffled"])
def test_kernel_reports_the_first_inf_in_input_order(layout, method, nan_row):
    """The kernel finds +-Inf through its group sums (a complete group's, or the
    general path's for a group with NaN or dropped rows) and names the first one."""
    gen = torch.Generator().manual_seed(4)
    rewards = torch.rand(64, 3, generator=gen)
    if nan_row is not None:
        rewards[nan_row, 0] = float("nan")
    layout_kw = dict(group_size=8) if layout == "fixed" else dict(group_index=torch.randperm(64, generator=gen) // 8)
    bad = _with_inf(rewards, (41, 2), (6, 1))
    with pytest.raises(ValueError, match=r"rewards contains \+-Inf at index \(6, 1\)"):
        dk.fused_advantage(bad, method=method, backend="cpu", **layout_kw)
    dk.fused_advantage(bad, method=method, backend="cpu", validate=False, **layout_kw)


def test_overflowing_finite_sums_are_not_taken_for_inf():
    rewards = torch.tensor([[1.5e308, 0.0], [1.7e308, 1.0], [0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    out = dk.fused_advantage(rewards, 2, method="gdpo", backend="cpu")
    assert out.advantages.shape == (4,)


def test_shuffled_layout_mixes_complete_and_partial_groups():
    """A shuffled layout's complete groups, a group with a NaN (read entry by
    entry) and a group far from zero relative to its spread."""
    gen = torch.Generator().manual_seed(12)
    rows, group = 4096, 8
    rewards = torch.randn(rows, 4, generator=gen)
    ids = torch.randperm(rows, generator=gen) // group
    rewards[ids == 3, 1] = float("nan")
    rewards[ids == 7] += 1e4
    for method in ("dara", "grpo", "dvao"):
        ref = dk.fused_advantage(rewards, group_index=ids, method=method, backend="reference")
        out = dk.fused_advantage(rewards, group_index=ids, method=method, backend="cpu")
        assert_matches(out, ref, tolerance("cpu", torch.float32), method)


def test_token_outputs_are_reused_only_once_freed_and_within_the_bound():
    """A call's token output keeps its values while later calls run; a freed
    buffer serves a later call whose output fits it (a longer or shorter T);
    with a bound of 0 nothing is kept."""
    case = make_case(6, "shuffled", 3, shape=(97,))
    gen = torch.Generator().manual_seed(3)

    def call(t):
        mask = torch.rand(97, t, generator=gen) < 0.6
        out = dk.fused_advantage(case.rewards, method="gdpo", preset="verl", response_mask=mask, backend="cpu",
                                 **case.layout)
        assert torch.equal(out.token_advantages, out.advantages[:, None] * mask)
        return out.token_advantages

    first = call(3000)
    kept = first.clone()
    second = call(3000)
    assert torch.equal(first, kept) and second.data_ptr() != first.data_ptr()
    pointer = first.data_ptr()
    del second, first  # the last one freed is kept
    assert call(2500).data_ptr() == pointer  # reused: within twice the request
    previous = dk.set_token_cache_bytes(0)
    try:
        assert previous == 256 << 20
        assert dk.set_token_cache_bytes(0) == 0
        call(3000)
    finally:
        dk.set_token_cache_bytes(previous)
    with pytest.raises(ValueError, match="max_bytes"):
        dk.set_token_cache_bytes(-1)
