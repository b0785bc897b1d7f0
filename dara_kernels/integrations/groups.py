"""What the integrations need to know about a batch's groups, without any trainer library.

`group_ids` numbers a framework's group keys (uid strings, prompt ids). `group_signal` is the one place
where an integration's dynamic sampling or zero-variance filter decides whether a group carries a learning
signal: a multi-reward group whose rewards vary while their weighted sum is constant (accuracy up, length
down) teaches every reward, and a filter on the sum alone drops it.

The decision is the fused op's own (docs/spec.md#group-signal): its per-row `informative` (some reward is
active: at least two valid entries and a standard deviation above `active_tol`, NaN entries left out) and
`sum_informative` (the weighted summed reward varies over the group's scorable rows) flags, read per group.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from ..api import fused_advantage
from ..options import resolve_options

# The op's default, so that a group this module calls informative is one the op counts as active.
ACTIVE_TOL = resolve_options("dara", None).active_tol


def group_ids(index) -> torch.Tensor:
    """uid strings (or any hashables) to int64 group ids, numbered in order of first appearance. One dict
    lookup per row: sorting the strings, as np.unique does, costs about ten times as much for a verl batch."""
    values = np.asarray(index)
    if values.dtype.kind in "iu":
        return torch.from_numpy(values.astype(np.int64))
    numbers: dict = {}
    return torch.from_numpy(np.fromiter((numbers.setdefault(u, len(numbers)) for u in values.tolist()),
                                        dtype=np.int64, count=len(values)))


@dataclass
class GroupSignal:
    """Per group g (numbered 0..G-1; `group_of_row` maps rows to them)."""
    group_of_row: torch.Tensor  # [N] int64
    size: torch.Tensor  # [G] int64 rows
    any_reward_varies: torch.Tensor  # [G] bool: some reward k is active in g
    weighted_sum_varies: torch.Tensor  # [G] bool: sum_k b_k r_jk (NaN counted as 0) varies over g's scorable rows

    @property
    def informative(self) -> torch.Tensor:
        """[G] bool: some reward or the weighted sum varies (a superset of the groups a filter on the sum keeps,
        which differs only where NaN entries leave each reward with fewer than two scores)."""
        return self.any_reward_varies | self.weighted_sum_varies

    def keep_rows(self, keep_singletons: bool) -> torch.Tensor:
        """[N] bool: rows of informative groups and, if asked, of groups of one row (where no spread can be
        measured: SkyRL's filters keep them, ms-swift's drop them)."""
        keep = self.informative | ((self.size < 2) & keep_singletons)
        return keep[self.group_of_row]

    def first_rows(self) -> torch.Tensor:
        """[N] bool: the first row of each group."""
        first = torch.zeros(self.group_of_row.numel(), dtype=torch.bool)
        first[np.unique(self.group_of_row.numpy(), return_index=True)[1]] = True
        return first

    @property
    def rescued(self) -> int:
        """Groups a filter on the weighted sum would drop that some reward still varies in."""
        return int((self.any_reward_varies & ~self.weighted_sum_varies & (self.size >= 2)).sum())


def group_signal(rewards: torch.Tensor, index, reward_weights: Optional[Sequence[float]] = None,
                 tol: float = ACTIVE_TOL) -> GroupSignal:
    """rewards [N, K] (NaN: not scored), index [N] group keys (uids, ints), reward_weights [K] (default 1)."""
    r = torch.as_tensor(rewards).detach().to("cpu", torch.float64)
    if r.dim() != 2:
        raise ValueError(f"rewards must be [N, K], got shape {tuple(r.shape)}")
    groups = group_ids(index)
    if groups.numel() != r.shape[0]:
        raise ValueError(f"{r.shape[0]} reward rows but {groups.numel()} group keys")
    groups = torch.unique(groups, return_inverse=True)[1] if groups.numel() else groups
    num_groups = int(groups.max()) + 1 if groups.numel() else 0
    if reward_weights is not None and len(reward_weights) != r.shape[1]:
        raise ValueError(f"{len(reward_weights)} reward weights for {r.shape[1]} rewards")
    size = torch.zeros(num_groups, dtype=torch.int64).index_add(0, groups, torch.ones_like(groups))
    if not num_groups:
        empty = torch.zeros(0, dtype=torch.bool)
        return GroupSignal(groups, size, empty, empty)
    out = fused_advantage(r, group_index=groups, method="gdpo", batch_norm="none", active_tol=tol,
                          reward_weights=None if reward_weights is None else list(reward_weights))

    def per_group(flags: torch.Tensor) -> torch.Tensor:
        return torch.zeros(num_groups, dtype=torch.float64).index_add(0, groups, flags.double()) > 0

    return GroupSignal(groups, size, per_group(out.informative), per_group(out.sum_informative))
