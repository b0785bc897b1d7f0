"""What people run today, written from the projects' documented formulas, to
time against: TRL's vectorised normalize_then_sum GDPO and verl's GDPO (a
Python loop over uid strings, then token-level whitening)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch


def trl_style_gdpo(rewards: torch.Tensor, group_size: int, weights: torch.Tensor) -> torch.Tensor:
    n, k = rewards.shape
    grouped = rewards.float().view(-1, group_size, k)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    centred = grouped - mean
    count = (~torch.isnan(grouped)).sum(1, keepdim=True)
    std = (torch.nansum(centred ** 2, dim=1, keepdim=True) / (count - 1)).sqrt()
    adv = (centred / (std + 1e-4)).view(n, k)
    summed = torch.nansum(adv * weights, dim=1)
    return (summed - summed.mean()) / (summed.std() + 1e-4)


def verl_style_gdpo(rewards: torch.Tensor, uids: np.ndarray, weights: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    n, k = rewards.shape
    total = torch.zeros(n)
    for c in range(k):
        scores = rewards[:, c].float()
        id2score = defaultdict(list)
        for i in range(n):
            id2score[uids[i]].append(scores[i])
        id2mean, id2std = {}, {}
        for uid, vals in id2score.items():
            if len(vals) == 1:
                id2mean[uid], id2std[uid] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                stacked = torch.stack(vals)
                id2mean[uid], id2std[uid] = stacked.mean(), stacked.std()
        normed = scores.clone()
        for i in range(n):
            normed[i] = (scores[i] - id2mean[uids[i]]) / (id2std[uids[i]] + 1e-6)
        total += weights[c] * normed
    values = total.unsqueeze(1) * mask
    mean = (values * mask).sum() / mask.sum()
    var = ((values - mean) ** 2 * mask).sum() / mask.sum()
    var = var * mask.sum() / (mask.sum() - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8) * mask
