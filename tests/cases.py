"""Seeded batches for the sweeps: layouts, reward kinds and odd sizes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Odd sizes in every sweep: N = 97, groups of 1 and of 13.
FIXED_LAYOUTS = [(97, 97), (97, 1), (104, 13), (64, 8)]


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
