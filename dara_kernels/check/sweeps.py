"""Calls that probe one numerical edge each, run on every backend against the
float64 reference by the check (`python -m dara_kernels.check`) and by each
backend's tests (tests/sweep.py): rewards far from zero, the calibrations,
a batch without spread, RVPO's risk coefficients, groups without signal,
reward gates, group ids that are not 0 to G - 1."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch

from ..api import fused_advantage
from ..output import AdvantageOutput
from ..wire import METHODS
from .cases import calibration_rewards, gate_columns, gate_rewards, offset_rewards, signal_rewards


@dataclass(frozen=True)
class Call:
    """One fused_advantage call: its rewards, its layout and token weights
    (`inputs`: tensors follow the backend's device) and its options."""
    label: str
    rewards: torch.Tensor
    inputs: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)

    def run(self, backend: str, device: str = "cpu") -> AdvantageOutput:
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.inputs.items()}
        return fused_advantage(self.rewards.to(device), backend=backend, **inputs, **self.options)

    def describe(self) -> str:
        options = ", ".join(f"{k}={_short(v)}" for k, v in self.options.items())
        return f"{self.label} ({options})"


def _short(value) -> str:
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"[{value[0]}, ..., {value[-1]}] ({len(value)})"
    return repr(value)


def layouts(gen: torch.Generator, n: int, group: int) -> list[tuple[str, dict]]:
    return [("fixed", {"group_size": group}),
            ("shuffled", {"group_index": torch.randperm(n, generator=gen) // group})]


# (label, ratio of |mean| to spread, scale_by_std): the offsets the issue
# measured errors at, up to 1e4, with and without scaling by the std.
OFFSET_RATIOS = (16.0, 100.0, 1e4)
OFFSET_CASES = [(f"offset{int(r)}-{'std' if s else 'nostd'}", r, s) for r in OFFSET_RATIOS for s in (True, False)]


def offset_calls(method: str, n: int = 96, group: int = 8, ratios: tuple = OFFSET_RATIOS) -> Iterator[Call]:
    """Rewards offset far from zero relative to their spread (mean/spread up
    to 1e4), K = 4 with a density-0 reward, scale_by_std on and off, both
    layouts, float32 and float64 rows. For GRPO the weights (1, -1, ...)
    make the summed rewards cancel."""
    for seed, (label, ratio, by_std) in enumerate(OFFSET_CASES):
        if ratio not in ratios:
            continue
        gen = torch.Generator().manual_seed(seed)
        rewards = offset_rewards(gen, n, ratio)
        options = dict(method=method, scale_by_std=by_std)
        if method == "grpo":
            rewards[:, 1] = rewards[:, 0] + 1e-3 * torch.randn(n, generator=gen, dtype=torch.float64)
            options["reward_weights"] = [1.0, -1.0, 0.5, 1.0]
        for dtype in (torch.float32, torch.float64):
            for name, layout in layouts(gen, n, group):
                yield Call(f"{label} {name} {dtype}", rewards.to(dtype), layout, options)


# Each calibration with density weights (DARA: the cap binding, and none),
# and with static weights (the paper's Static-Asym and Static-Sym, w = 5 on
# one reward), on the two estimators' setups (verl token whitening, response).
CALIBRATION_OPTIONS = [
    dict(method=method, calibration=calibration, **extra)
    for calibration in ("positive", "symmetric")
    for method, extra in (("dara", {}), ("dara", {"max_weight": float("inf")}), ("dara", {"max_weight": 2.0}),
                          ("static", {"reward_weights": [1.0, 5.0, 1.0, 1.0]}))
]


def calibration_calls(n: int = 128, group: int = 4) -> Iterator[Call]:
    """Positive and symmetric calibration on rows with mixed signs, a capped
    reward and a density-0 reward (K = 4), both layouts, response and token
    batch normalisation."""
    for seed, options in enumerate(CALIBRATION_OPTIONS):
        gen = torch.Generator().manual_seed(100 + seed)
        rewards = calibration_rewards(gen, n).float()
        lengths = torch.randint(1, 40, (n,), generator=gen)
        mask = torch.arange(40)[None, :] < lengths[:, None]
        for name, layout in layouts(gen, n, group):
            for extra in ({}, {"preset": "verl", "response_mask": mask}):
                yield Call(f"calibration {name}", rewards, {**layout, **extra}, options)


def spreadless_calls(n: int = 48) -> Iterator[Call]:
    """Every row has the same s_j != 0 (positive calibration, one row of a
    pair rewarded on each reward, equal static weights): the batch std is 0,
    the factor 1 / bn_eps, so the advantages are 0 only if the row sums and
    the batch mean agree to double rounding (in float: 8e-2 off; the CUDA
    kernels needed double there)."""
    options = dict(method="static", calibration="positive", reward_weights=[5.0, 5.0])
    for group in (2, 6, 8):
        rewards = torch.zeros(group, 2)
        rewards[: group // 2, 0] = rewards[group // 2:, 1] = 0.37
        rewards = rewards.repeat(n // group, 1)
        for batch_norm, lengths in (("response", {}), ("token", {"response_lengths": torch.full((n,), 7)})):
            yield Call(f"groups of {group}", rewards, {"group_size": group, **lengths},
                       {**options, "batch_norm": batch_norm})


RVPO_COEFFICIENTS = (1e-3, 0.1, 1.0, 10.0, 1e3)


def soft_minimum_calls(n: int = 96, group: int = 8) -> Iterator[Call]:
    """RVPO's risk coefficient from 1e-3 (the mean of the z-scores, where exp
    and log cancel) to 1e3 (their minimum, where an unshifted exp overflows),
    K = 4 with a density-0 reward, rewards far from zero (offset 100),
    reward weights, float32 and float64 rows, fixed groups with response and
    shuffled ones with token batch normalisation."""
    for seed, k in enumerate(RVPO_COEFFICIENTS):
        gen = torch.Generator().manual_seed(300 + seed)
        rewards = offset_rewards(gen, n, 100.0)
        lengths = torch.randint(1, 30, (n,), generator=gen)
        options = dict(method="rvpo", rvpo_k=k, reward_weights=[1.0, 0.5, 2.0, 1.0])
        # Each layout once with each normalisation: fixed groups by response, shuffled ones by token.
        pairs = zip(layouts(gen, n, group), ({}, {"batch_norm": "token", "response_lengths": lengths}))
        for (name, layout), extra in pairs:
            for dtype in (torch.float32, torch.float64):
                yield Call(f"rvpo_k={k} {name} {dtype}", rewards.to(dtype), {**layout, **extra}, options)


def no_signal_calls(n: int = 64) -> Iterator[Call]:
    """Every method under both no_signal rules, on a batch with a group
    without signal and a conflict group (signal_rewards), fixed groups with
    response and shuffled ones with token batch normalisation: flags, counts
    and advantages."""
    for seed, method in enumerate(METHODS):
        gen = torch.Generator().manual_seed(500 + seed)
        rewards = signal_rewards(gen, n).float()
        lengths = torch.randint(1, 30, (n,), generator=gen)
        for rule in ("keep", "zero"):
            pairs = zip(layouts(gen, n, 4), ({}, {"batch_norm": "token", "response_lengths": lengths}))
            for (name, layout), extra in pairs:
                yield Call(f"{method} no_signal={rule} {name}", rewards, {**layout, **extra},
                           dict(method=method, no_signal=rule))


# Length counts only where correct, format only where the graded gate is
# positive: by name, and by column index.
GATE_NAMES = ["correct", "format", "length", "graded"]
GATES = [dict(reward_gates={"length": "correct", "format": "graded"}, reward_names=GATE_NAMES),
         dict(reward_gates={2: 0, 1: 3})]


def gate_calls(n: int = 48) -> Iterator[Call]:
    """Every method with reward gates (docs/spec.md#reward-gates): a binary
    and a graded gate, gates and gated entries missing; by turns, gates by
    name with fixed groups, response normalisation and nan_policy="ignore",
    and by index with shuffled groups, token normalisation and "zero" (a
    missing gate counts as 0, so it fails)."""
    for seed, method in enumerate(METHODS):
        gen = torch.Generator().manual_seed(700 + seed)
        rewards = gate_rewards(gen, n).float()
        lengths = torch.randint(1, 30, (n,), generator=gen)
        by_token = {"batch_norm": "token", "response_lengths": lengths}
        (name, layout), extra = layouts(gen, n, 4)[seed % 2], ({}, by_token)[seed % 2]
        options = dict(method=method, nan_policy=("ignore", "zero")[seed % 2], **GATES[seed % 2])
        yield Call(f"{method} gates {name}", rewards, {**layout, **extra}, options)
    yield from gate_column_calls(n)
    yield from infinite_gated_calls(n)


# K = 2 to 4 take each backend's compile-time-K path, K = 6 its runtime-K one.
GATE_COLUMN_KS = (2, 3, 4, 6)


def gate_column_calls(n: int) -> Iterator[Call]:
    """A gate in every column and a gated reward in every column: at shift s,
    reward s + 1 counts only where reward s passes, s + 3 only where s + 2
    does, s + 5 where s + 4 does (columns mod K, as many pairs as K holds),
    for every s; methods and layouts rotating."""
    for k in GATE_COLUMN_KS:
        for shift in range(k):
            seed = 10 * k + shift
            method = METHODS[seed % len(METHODS)]
            gen = torch.Generator().manual_seed(800 + seed)
            gates = {(shift + 2 * i + 1) % k: (shift + 2 * i) % k for i in range(k // 2)}
            (name, layout) = layouts(gen, n, 4)[seed % 2]
            yield Call(f"{method} K={k} gates {gates} {name}", gate_columns(gen, n, k).float(), layout,
                       dict(method=method, reward_gates=gates))


def infinite_gated_calls(n: int) -> Iterator[Call]:
    """An infinite reward under a failing gate and under a missing one: still
    the Inf error, as if it had no gate (docs/spec.md#reward-gates)."""
    for gate_value in (0.0, float("nan")):
        gen = torch.Generator().manual_seed(890)
        rewards = gate_rewards(gen, n).float()
        rewards[5, 0], rewards[5, 2] = gate_value, float("inf")
        yield Call(f"+Inf under a gate of {gate_value}", rewards, {"group_size": 4},
                   dict(method="gdpo", **GATES[1]))


def group_id_calls(n: int = 60) -> Iterator[Call]:
    """Every method with group ids other than 0 to G - 1, in uneven groups:
    dense ids with gaps (every third id used, some groups empty: an unused
    id must not count as a group) and ids across the int64 range (a sort's
    ranks), the second with token normalisation."""
    wide = torch.tensor([-2**63, -2**40, -7, 0, 3, 2**31, 2**40 + 1, 2**62, 2**63 - 1])
    for seed, method in enumerate(METHODS):
        gen = torch.Generator().manual_seed(900 + seed)
        rewards = calibration_rewards(gen, n).float()
        groups = torch.randint(0, len(wide), (n,), generator=gen)
        lengths = torch.randint(1, 30, (n,), generator=gen)
        yield Call(f"{method} ids with gaps", rewards, {"group_index": 3 * groups + 11}, {"method": method})
        yield Call(f"{method} ids across int64", rewards, {"group_index": wide[groups], "response_lengths": lengths},
                   {"method": method, "batch_norm": "token"})


# The edge sweeps besides the per-method offsets (offset_calls), in the order
# the check runs them (runner.check_calls); each backend's tests run every one
# by name (tests/sweep.py's edge_sweep), so a sweep added here reaches both.
EDGE_SWEEPS: Mapping[str, Callable[[], Iterator[Call]]] = {
    "calibrations": calibration_calls,
    "batch_without_spread": spreadless_calls,
    "rvpo_risk_coefficients": soft_minimum_calls,
    "groups_without_signal": no_signal_calls,
    "reward_gates": gate_calls,
    "group_ids": group_id_calls,
}
