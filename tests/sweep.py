"""The backend-vs-reference comparison shared by each backend's test file."""
from __future__ import annotations

import itertools

import torch

import dara_kernels as dk
from tests.cases import FIXED_LAYOUTS, OFFSET_CASES, calibration_rewards, make_case, offset_rewards
from tests.compare import TOLERANCES, assert_matches

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
KS = [1, 2, 3, 7]
LAYOUTS = ["fixed", "shuffled"]


def compare_once(backend: str, method: str, layout: str, k: int, dtype: torch.dtype, shape, bn: str,
                 policy: str, seed: int, device: str = "cpu", nan_fraction: float = 0.15) -> None:
    case = make_case(seed, layout, k, nan_fraction=nan_fraction, dtype=dtype, shape=shape)
    kwargs = case.kwargs(with_mask=(bn == "token" and seed % 2 == 0),
                         with_lengths=(bn == "token" and seed % 2 == 1))
    options = dict(method=method, batch_norm=bn, nan_policy=policy)
    if method in ("saw", "sa_mrpo") and seed % 3 == 0:
        options["reward_bounds"] = [(-4.0, 4.0)] * k
    if seed % 4 == 1:
        options["reward_weights"] = torch.linspace(0.5, 2.0, k).tolist()
    _against_reference(backend, case.rewards, kwargs, options, device, case.label)


def sweep_against_reference(backend: str, method: str, layout: str, k: int, dtype: torch.dtype,
                            shapes=None, batch_norms=("response", "token", "none"),
                            nan_policies=("ignore", "zero"), device: str = "cpu", nan_fraction: float = 0.15) -> int:
    shapes = shapes or (FIXED_LAYOUTS if layout == "fixed" else [(97,), (40,)])
    runs = 0
    for seed, (shape, bn, policy) in enumerate(itertools.product(shapes, batch_norms, nan_policies)):
        compare_once(backend, method, layout, k, dtype, shape, bn, policy, seed, device, nan_fraction)
        runs += 1
    return runs


def _against_reference(backend: str, rewards: torch.Tensor, layout: dict, options: dict, device: str,
                       context: str) -> None:
    ref = dk.fused_advantage(rewards, backend="reference", **layout, **options)
    on_device = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in layout.items()}
    out = dk.fused_advantage(rewards.to(device), backend=backend, **on_device, **options)
    assert_matches(out, ref, TOLERANCES[backend][rewards.dtype], f"{context} {options}")


def _layouts(gen: torch.Generator, n: int, group: int) -> list[tuple[str, dict]]:
    return [("fixed", {"group_size": group}),
            ("shuffled", {"group_index": torch.randperm(n, generator=gen) // group})]


def offset_sweep(backend: str, method: str, device: str = "cpu", n: int = 96, group: int = 8) -> int:
    """Rewards offset far from zero relative to their spread (mean/spread up
    to 1e4), K = 4 with a density-0 reward, scale_by_std on and off, both
    layouts, float32 and float64 rows. For GRPO the weights (1, -1, ...)
    make the summed rewards cancel."""
    runs = 0
    for seed, (label, ratio, by_std) in enumerate(OFFSET_CASES):
        gen = torch.Generator().manual_seed(seed)
        rewards = offset_rewards(gen, n, ratio)
        options = dict(method=method, scale_by_std=by_std)
        if method == "grpo":
            rewards[:, 1] = rewards[:, 0] + 1e-3 * torch.randn(n, generator=gen, dtype=torch.float64)
            options["reward_weights"] = [1.0, -1.0, 0.5, 1.0]
        for dtype in (torch.float32, torch.float64):
            for name, layout in _layouts(gen, n, group):
                _against_reference(backend, rewards.to(dtype), layout, options, device, f"{label} {name} {dtype}")
                runs += 1
    return runs


# Each calibration with density weights (DARA: the cap binding, and none),
# and with static weights (the paper's Static-Asym and Static-Sym, w = 5 on
# one reward), on the two estimators' setups (verl token whitening, response).
CALIBRATION_OPTIONS = [
    dict(method=method, calibration=calibration, **extra)
    for calibration in ("positive", "symmetric")
    for method, extra in (("dara", {}), ("dara", {"max_weight": float("inf")}), ("dara", {"max_weight": 2.0}),
                          ("static", {"reward_weights": [1.0, 5.0, 1.0, 1.0]}))
]


def calibration_sweep(backend: str, device: str = "cpu", n: int = 128, group: int = 4) -> int:
    """Positive and symmetric calibration on rows with mixed signs, a capped
    reward and a density-0 reward (K = 4), both layouts, response and token
    batch normalisation."""
    runs = 0
    for seed, options in enumerate(CALIBRATION_OPTIONS):
        gen = torch.Generator().manual_seed(100 + seed)
        rewards = calibration_rewards(gen, n).float()
        lengths = torch.randint(1, 40, (n,), generator=gen)
        mask = torch.arange(40)[None, :] < lengths[:, None]
        for name, layout in _layouts(gen, n, group):
            for extra in ({}, {"preset": "verl", "response_mask": mask}):
                _against_reference(backend, rewards, {**layout, **extra}, options, device, f"calibration {name}")
                runs += 1
    return runs


def spreadless_batch_sweep(backend: str, device: str = "cpu", n: int = 48) -> int:
    """Every row has the same s_j != 0 (positive calibration, one row of a
    pair rewarded on each reward, equal static weights): the batch std is 0,
    the factor 1 / bn_eps, so the advantages are 0 only if the row sums and
    the batch mean agree to double rounding (in float: 8e-2 off; the CUDA
    kernels needed double there)."""
    runs = 0
    options = dict(method="static", calibration="positive", reward_weights=[5.0, 5.0])
    for group in (2, 6, 8):
        rewards = torch.zeros(group, 2)
        rewards[: group // 2, 0] = rewards[group // 2:, 1] = 0.37
        rewards = rewards.repeat(n // group, 1)
        for batch_norm, lengths in (("response", {}), ("token", {"response_lengths": torch.full((n,), 7)})):
            layout = {"group_size": group, **lengths}
            _against_reference(backend, rewards, layout, {**options, "batch_norm": batch_norm}, device,
                               f"groups of {group}")
            runs += 1
    return runs


RVPO_COEFFICIENTS = (1e-3, 0.1, 1.0, 10.0, 1e3)


def soft_minimum_sweep(backend: str, device: str = "cpu", n: int = 96, group: int = 8) -> int:
    """RVPO's risk coefficient from 1e-3 (the mean of the z-scores, where exp
    and log cancel) to 1e3 (their minimum, where an unshifted exp overflows),
    K = 4 with a density-0 reward, rewards far from zero (offset 100),
    reward weights, float32 and float64 rows, fixed groups with response and
    shuffled ones with token batch normalisation."""
    runs = 0
    for seed, k in enumerate(RVPO_COEFFICIENTS):
        gen = torch.Generator().manual_seed(300 + seed)
        rewards = offset_rewards(gen, n, 100.0)
        lengths = torch.randint(1, 30, (n,), generator=gen)
        options = dict(method="rvpo", rvpo_k=k, reward_weights=[1.0, 0.5, 2.0, 1.0])
        # Each layout once with each normalisation: fixed groups by response, shuffled ones by token.
        pairs = zip(_layouts(gen, n, group), ({}, {"batch_norm": "token", "response_lengths": lengths}))
        for (name, layout), extra in pairs:
            for dtype in (torch.float32, torch.float64):
                _against_reference(backend, rewards.to(dtype), {**layout, **extra}, options, device,
                                   f"rvpo_k={k} {name} {dtype}")
                runs += 1
    return runs


def signal_rewards(gen: torch.Generator, n: int) -> torch.Tensor:
    """K = 4 in groups of 4: correctness, a rare format reward, a graded
    length reward and a reward active nowhere; the first group perfect on
    every reward (no signal), the second with rewards that vary while their
    sum is constant (a conflict group), a missing entry in the third."""
    rewards = calibration_rewards(gen, n)
    rewards[:4] = 1.0
    rewards[4:8, :3] = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 1.0]]).repeat(2, 1)
    rewards[9, 2] = float("nan")
    return rewards


def no_signal_sweep(backend: str, device: str = "cpu", n: int = 64) -> int:
    """Every method under both no_signal rules, on a batch with a group
    without signal and a conflict group (signal_rewards), fixed groups with
    response and shuffled ones with token batch normalisation: flags, counts
    and advantages."""
    runs = 0
    for seed, method in enumerate(dk.METHODS):
        gen = torch.Generator().manual_seed(500 + seed)
        rewards = signal_rewards(gen, n).float()
        lengths = torch.randint(1, 30, (n,), generator=gen)
        for rule in ("keep", "zero"):
            pairs = zip(_layouts(gen, n, 4), ({}, {"batch_norm": "token", "response_lengths": lengths}))
            for (name, layout), extra in pairs:
                _against_reference(backend, rewards, {**layout, **extra}, dict(method=method, no_signal=rule),
                                   device, f"{method} no_signal={rule} {name}")
                runs += 1
    return runs


def gate_rewards(gen: torch.Generator, n: int) -> torch.Tensor:
    """K = 4: correctness (0/1), a format reward (0/1), a graded length reward
    (-2 to 2) and a graded gate with negative, zero and positive values; about
    one entry in eight missing in every column but the format one, so that
    gates and gated entries are missing, alone and together."""
    correct = (torch.rand(n, generator=gen) < 0.5).double()
    fmt = (torch.rand(n, generator=gen) < 0.3).double()
    length = torch.randint(-2, 3, (n,), generator=gen).double()
    graded = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64)[torch.randint(0, 4, (n,), generator=gen)]
    rewards = torch.stack([correct, fmt, length, graded], 1)
    for column in (0, 2, 3):
        rewards[torch.rand(n, generator=gen) < 0.125, column] = float("nan")
    return rewards


# Length counts only where correct, format only where the graded gate is
# positive: by name, and by column index.
NAMES = ["correct", "format", "length", "graded"]
GATES = [dict(reward_gates={"length": "correct", "format": "graded"}, reward_names=NAMES),
         dict(reward_gates={2: 0, 1: 3})]


def gate_sweep(backend: str, device: str = "cpu", n: int = 48) -> int:
    """Every method with reward gates (docs/spec.md#reward-gates): a binary
    and a graded gate, gates and gated entries missing; by turns, gates by
    name with fixed groups, response normalisation and nan_policy="ignore",
    and by index with shuffled groups, token normalisation and "zero" (a
    missing gate counts as 0, so it fails)."""
    runs = 0
    for seed, method in enumerate(dk.METHODS):
        gen = torch.Generator().manual_seed(700 + seed)
        rewards = gate_rewards(gen, n).float()
        lengths = torch.randint(1, 30, (n,), generator=gen)
        by_token = {"batch_norm": "token", "response_lengths": lengths}
        (name, layout), extra = _layouts(gen, n, 4)[seed % 2], ({}, by_token)[seed % 2]
        options = dict(method=method, nan_policy=("ignore", "zero")[seed % 2], **GATES[seed % 2])
        _against_reference(backend, rewards, {**layout, **extra}, options, device, f"{method} {options} {name}")
        runs += 1
    return runs
