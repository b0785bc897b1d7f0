"""The group-signal decision a filter makes on a batch's rewards (`decide`): the fused op called with the run's
`Settings` (core.py), the call the advantages make, and each group's flag read from it by the criterion
(dara_kernels/group_signal.py, which also holds the sampling metrics and needs no integration)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from dara_kernels.group_signal import GroupSignal, group_ids, signal_of

from .core import Settings, advantages


def decide(settings: Settings, rewards: torch.Tensor, index, criterion: str,
           reward_weights: Optional[Sequence[float]] = None) -> GroupSignal:
    """The criterion's decision on rewards [N, K] (NaN: not scored) grouped by `index` [N] (uids, ints), from
    the op called with the run's settings, as for the advantages."""
    r = torch.as_tensor(rewards).detach().to("cpu", torch.float32)
    if r.dim() != 2:
        raise ValueError(f"rewards must be [N, K], got shape {tuple(r.shape)}")
    groups = group_ids(index)
    if groups.numel() != r.shape[0]:
        raise ValueError(f"{r.shape[0]} reward rows but {groups.numel()} group keys")
    groups = torch.unique(groups, return_inverse=True)[1]
    weights = None if reward_weights is None else list(reward_weights)
    # A filter sees no response mask; the flags do not depend on token weights, which a token batch norm needs.
    out = advantages(settings, r, group_index=groups, reward_weights=weights,
                     response_lengths=torch.ones(r.shape[0])).output
    return signal_of(out, groups, criterion)
