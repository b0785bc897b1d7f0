"""Seeded batches for the sweeps (the check's and the tests'): layouts,
reward kinds and odd sizes."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Case:
    rewards: torch.Tensor
    layout: dict
    mask: torch.Tensor
    lengths: torch.Tensor
    label: str = ""

    def kwargs(self, with_mask: bool = False, with_lengths: bool = False) -> dict:
        out = dict(self.layout)
        if with_mask:
            out["response_mask"] = self.mask
        if with_lengths:
            out["response_lengths"] = self.lengths
        return out


def reward_columns(gen: torch.Generator, n: int, k: int, nan_fraction: float) -> torch.Tensor:
    """Column kinds cycle: sparse binary, dense binary, continuous, constant, graded."""
    cols = []
    for c in range(k):
        kind = c % 5
        if kind == 0:
            col = (torch.rand(n, generator=gen) < 0.08).double()
        elif kind == 1:
            col = (torch.rand(n, generator=gen) < 0.5).double()
        elif kind == 2:
            col = torch.randn(n, generator=gen, dtype=torch.float64) * 2.0 + 0.5
        elif kind == 3:
            col = torch.full((n,), 0.7, dtype=torch.float64)
        else:
            col = torch.randint(-3, 4, (n,), generator=gen).double()
        cols.append(col)
    rewards = torch.stack(cols, 1)
    if nan_fraction:
        rewards[torch.rand(n, k, generator=gen) < nan_fraction] = float("nan")
        rewards[torch.randint(0, n, (2,), generator=gen)] = float("nan")  # unscorable rows
    return rewards


def shuffled_index(gen: torch.Generator, n: int) -> torch.Tensor:
    """Uneven groups including singletons and a 13, ids sparse and shuffled."""
    sizes, total = [1, 13, 1], 15
    while total < n:
        s = int(torch.randint(1, 9, (1,), generator=gen))
        s = min(s, n - total)
        sizes.append(s)
        total += s
    ids = torch.randperm(len(sizes) * 7, generator=gen)[: len(sizes)] * 1000 - 5000
    index = torch.repeat_interleave(ids, torch.tensor(sizes))
    return index[torch.randperm(n, generator=gen)]


def make_case(seed: int, layout: str, k: int, nan_fraction: float = 0.1,
              dtype: torch.dtype = torch.float32, shape=(97, 13)) -> Case:
    gen = torch.Generator().manual_seed(seed)
    if layout == "fixed":
        n, g = shape
        lay = {"group_size": g}
    else:
        n = shape[0]
        lay = {"group_index": shuffled_index(gen, n)}
    rewards = reward_columns(gen, n, k, nan_fraction).to(dtype)
    t = 11
    lengths = torch.randint(0, t + 1, (n,), generator=gen)
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1))
    return Case(rewards, lay, mask, lengths, f"{layout}-k{k}-{dtype}-seed{seed}")


def offset_rewards(gen: torch.Generator, n: int, ratio: float, k: int = 4) -> torch.Tensor:
    """Rewards far from zero relative to their spread (reward-model scores,
    token counts): column c sits at ratio * spread from zero, with signs and
    spreads varying by column; the last column is constant (density 0)."""
    spreads = torch.tensor([0.01, 1.0, 3.0, 0.2, 0.5, 2.0][:k - 1], dtype=torch.float64)
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0][:k - 1], dtype=torch.float64)
    noise = torch.randn(n, k - 1, generator=gen, dtype=torch.float64)
    cols = signs * ratio * spreads + spreads * noise
    return torch.cat([cols, torch.full((n, 1), ratio * 0.3, dtype=torch.float64)], 1)


def calibration_rewards(gen: torch.Generator, n: int) -> torch.Tensor:
    """K = 4 in the paper's tool-calling shape: correctness about 30%, a rare
    format reward (active in so few groups that DARA caps its weight), a
    graded length reward with rows of both signs, and a reward active
    nowhere (density 0)."""
    correct = (torch.rand(n, generator=gen) < 0.3).double()
    fmt = torch.zeros(n, dtype=torch.float64)
    fmt[torch.randint(0, n, (2,), generator=gen)] = 1.0
    length = torch.randint(-2, 3, (n,), generator=gen).double()
    return torch.stack([correct, fmt, length, torch.ones(n, dtype=torch.float64)], 1)


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



def gate_columns(gen: torch.Generator, n: int, k: int) -> torch.Tensor:
    """K columns, each one a gate for one reward and gated by another somewhere in the gate sweep: graded
    (-1, 0, 0.5, 2) in even columns and binary in odd ones, about one entry in eight missing in each."""
    graded = torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    columns = [graded[torch.randint(0, 4, (n,), generator=gen)] if c % 2 == 0
               else (torch.rand(n, generator=gen) < 0.5).double() for c in range(k)]
    rewards = torch.stack(columns, 1)
    rewards[torch.rand(n, k, generator=gen) < 0.125] = float("nan")
    return rewards
