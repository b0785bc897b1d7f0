"""The Triton kernels against the float64 reference. Without a GPU they run
under TRITON_INTERPRET=1 (set by conftest before triton is imported), so sizes
stay small; on a GPU the same tests run the compiled kernels on CUDA tensors,
plus the full sweep."""
import itertools
import os

import pytest
import torch

import dara_kernels as dk
from dara_kernels import backends
from dara_kernels.check.cases import make_case
from dara_kernels.check.sweeps import EDGE_SWEEPS, OFFSET_RATIOS
from dara_kernels.wire import OUTPUT_FIELDS
from tests.backend_devices import device_for
from tests.compare import assert_matches, tolerance
from tests.sweep import (
    DTYPES,
    KS,
    LAYOUTS,
    compare_once,
    edge_sweep,
    offset_sweep,
    sweep_against_reference,
)

DEVICE = device_for("triton")
COMPILED_ON_GPU = DEVICE == "cuda" and os.environ.get("TRITON_INTERPRET") != "1"
pytestmark = pytest.mark.skipif(dk.unavailable_reason("triton", torch.device(DEVICE)) is not None,
                                reason=str(dk.unavailable_reason("triton", torch.device(DEVICE))))

# Interpreter-sized shapes that still hold the odd cases: one group of 97,
# groups of one, groups of 13; shuffled: uneven groups with singletons and a 13.
SHAPES = {"fixed": [(97, 97), (13, 1), (104, 13)], "shuffled": [(40,), (31,)]}
COMBOS = list(itertools.product(KS, DTYPES, ("response", "token", "none"), ("ignore", "zero")))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_against_reference(method, layout):
    """Each (method, layout) takes three rotating combinations, so every K,
    dtype, batch norm and NaN policy meets every method across the file."""
    start = (dk.METHODS.index(method) * 7 + LAYOUTS.index(layout) * 3) % len(COMBOS)
    for i in range(3):
        k, dtype, bn, policy = COMBOS[(start + i * 17) % len(COMBOS)]
        shape = SHAPES[layout][i % len(SHAPES[layout])]
        compare_once("triton", method, layout, k, dtype, shape, bn, policy, seed=i, device=DEVICE)


@pytest.mark.parametrize("method", dk.METHODS)
def test_rewards_far_from_zero(method):
    """Mean/spread up to 1e4: each row's difference from its group mean is
    taken in double, so the mean's rounding does not scale with the offset.
    The interpreter takes the 1e4 offset only (a third of the calls, where
    cancellation is worst); the compiled kernels take them all."""
    ratios = OFFSET_RATIOS if COMPILED_ON_GPU else (1e4,)
    assert offset_sweep("triton", method, device=DEVICE, ratios=ratios) > 0


@pytest.mark.parametrize("name", EDGE_SWEEPS)
def test_edge_sweep(name):
    """Each of the check's edge sweeps (dara_kernels/check/sweeps.py, EDGE_SWEEPS): the calibrations, a
    batch without spread, RVPO's risk coefficients, groups without signal, reward gates, group ids."""
    assert edge_sweep("triton", name, device=DEVICE) > 0


# The interpreter's numpy warns on the arithmetic with Inf; the counts are what is checked.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("gates", [None, {2: 1}], ids=["ungated", "inf-under-a-failing-gate"])
@pytest.mark.parametrize("policy, missing", [("ignore", 3), ("zero", 0)])
def test_accumulate_counts_bad_rewards(policy, missing, gates):
    """Distributed mode's check: accumulate counts +-Inf entries and the NaN
    entries that do not count into their slots, summed over its programs, so
    every rank raises the same error after the all-reduce; an infinite
    reward under a failing gate is still infinite (docs/spec.md#reward-gates)."""
    from dara_kernels._ops import kernel_accumulate
    from dara_kernels.distributed import raise_on_bad_input
    from dara_kernels.options import resolve_options
    from dara_kernels.validation import prepare_inputs
    from dara_kernels.wire import ACCUMULATOR_SEGMENTS, combined_columns, segment_offsets

    rewards = make_case(9, "fixed", 3, nan_fraction=0.0, shape=(32, 4)).rewards
    rewards[[1, 30], [0, 2]] = torch.tensor([float("inf"), float("-inf")])
    rewards[[2, 2, 17], [0, 1, 2]] = float("nan")
    if gates:
        # Reward 2 counts only where reward 1 passes: row 30's Inf under a failing gate; row 2's missing gate
        # makes its reward 2 missing too (under "ignore"; under "zero" the missing gate is a failing one).
        rewards[:, 1] = 1.0
        rewards[2, 1], rewards[30, 1] = float("nan"), 0.0
        missing += policy == "ignore"
    opts = resolve_options("dara", None, nan_policy=policy, reward_gates=gates)
    inputs = prepare_inputs(rewards.to(DEVICE), group_size=4, group_index=None, reward_weights=None,
                            response_mask=None, response_lengths=None, reward_bounds=None, nan_policy=policy,
                            batch_norm=opts.batch_norm, validate=True, distributed=True,
                            reward_gates=opts.reward_gates)
    acc = kernel_accumulate(inputs, opts, torch.ops.dara_triton)[0].cpu()
    slots = segment_offsets(ACCUMULATOR_SEGMENTS, 3, combined_columns("dara", 3, positive=True))
    assert acc[slots["infinite_rewards"]] == 2
    assert acc[slots["missing_rewards"]] == missing
    assert acc[slots["negative_lengths"]] == 0
    with pytest.raises(ValueError, match="2 [+]-Inf entries"):
        raise_on_bad_input(acc, inputs, opts)


@pytest.mark.parametrize("preset", ["trl", "verl"])
def test_presets_with_token_output(preset):
    case = make_case(3, "shuffled", 3, shape=(31,))
    kw = case.kwargs(with_mask=True)
    ref = dk.fused_advantage(case.rewards, method="gdpo", preset=preset, backend="reference", **kw)
    out = dk.fused_advantage(case.rewards.to(DEVICE), method="gdpo", preset=preset, backend="triton",
                             **{k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    assert_matches(out, ref, tolerance("triton", torch.float32), preset)


@pytest.mark.parametrize("options", [dict(scale_by_std=False, unbiased=False), dict(singleton="verl"),
                                     dict(alpha=1.0, density_floor=0.3, apply_query_scale=False)])
def test_options(options):
    case = make_case(5, "shuffled", 3, shape=(31,))
    for method in ("dara", "gd2po_hard"):
        ref = dk.fused_advantage(case.rewards, method=method, backend="reference", **options, **case.layout)
        out = dk.fused_advantage(case.rewards.to(DEVICE), method=method, backend="triton", **options,
                                 group_index=case.layout["group_index"].to(DEVICE))
        assert_matches(out, ref, tolerance("triton", torch.float32), str(options))


def test_reduce_adds_the_other_ranks_sums():
    """Distributed mode's hook: reduce, called once between accumulate and
    finalize, adds the other rank's accumulators (max of its extrema), and
    this rank's rows then get the whole batch's answer."""
    from dara_kernels.options import resolve_options
    from dara_kernels.validation import prepare_inputs

    run = backends.backend("triton").run

    case = make_case(6, "fixed", 3, shape=(104, 13))
    opts = resolve_options("saw", None)

    def inputs_of(rows):
        return prepare_inputs(case.rewards[rows].to(DEVICE), group_size=13, group_index=None, reward_weights=None,
                              response_mask=None, response_lengths=None, reward_bounds=None,
                              nan_policy="ignore", batch_norm="response", validate=True)

    other = {}

    def keep_other(acc, ext):
        other["acc"], other["ext"] = acc.clone(), ext.clone()
        return acc, ext

    calls = []

    def add_other(acc, ext):
        calls.append(1)
        return acc + other["acc"], torch.maximum(ext, other["ext"])

    run(inputs_of(slice(52, None)), opts, keep_other)
    out = run(inputs_of(slice(None, 52)), opts, add_other)
    ref = dk.fused_advantage(case.rewards, 13, method="saw", backend="reference")
    ref = ref._replace(**{name: getattr(ref, name)[:52] for name, shape, _ in OUTPUT_FIELDS if shape == "N"})
    assert calls == [1]
    assert_matches(out, ref, tolerance("triton", torch.float32), "reduce")


def test_deterministic():
    case = make_case(8, "shuffled", 4, shape=(40,))
    a = dk.fused_advantage(case.rewards.to(DEVICE), group_index=case.layout["group_index"].to(DEVICE),
                           backend="triton")
    b = dk.fused_advantage(case.rewards.to(DEVICE), group_index=case.layout["group_index"].to(DEVICE),
                           backend="triton")
    for name in a._fields:
        if getattr(a, name) is not None:
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_at_the_column_limit():
    k = backends.backend("triton").max_rewards
    compare_once("triton", "dara", "shuffled", k, torch.float32, (31,), "token", "ignore", seed=2, device=DEVICE)


@pytest.mark.skipif(not COMPILED_ON_GPU, reason="the full sweep runs the compiled kernels on a GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", dk.METHODS)
def test_full_sweep_on_gpu(method, layout, k, dtype):
    assert sweep_against_reference("triton", method, layout, k, dtype, device="cuda") > 0
