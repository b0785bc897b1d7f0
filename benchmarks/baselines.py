"""What people run today, written from the projects' documented formulas, to
time against: TRL's vectorised normalize_then_sum GDPO, verl's GDPO (a
Python loop over uid strings, then token-level whitening), DARA in eager
float32 torch, and the shape of the DARA authors' per-group estimator."""
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
    return verl_token_whiten(total, mask)


def verl_token_whiten(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's masked whitening of per-response scores broadcast over tokens:
    the masked mean and unbiased variance, rsqrt(var + 1e-8)."""
    values = scores.unsqueeze(1) * mask
    tokens = mask.sum()
    mean = values.sum() / tokens
    var = ((values - mean) ** 2 * mask).sum() / (tokens - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8) * mask


def eager_dara(rewards: torch.Tensor, group_size: int, calibration: str = "positive", max_weight: float = 5.0,
               eps: float = 1e-6, bn_eps: float = 1e-6) -> torch.Tensor:
    """DARA as a user would write it in eager float32 torch, for contiguous
    groups: one view, the group mean and std, the density weights, the
    calibrated sum, the batch normalisation."""
    n, k = rewards.shape
    x = rewards.view(-1, group_size, k)
    std, mean = torch.std_mean(x, dim=1, keepdim=True)
    active = std > 1e-6
    z = torch.where(active, (x - mean) / (std + eps), 0.0)
    density = active.float().mean((0, 1))
    weights = torch.where(density > 0, (density.max() / density).sqrt().clamp(max=max_weight), 1.0)
    if calibration == "positive":
        s = (z + (weights - 1) * z.clamp(min=0)).sum(-1)
    else:
        s = (z * weights).sum(-1)
    s = s.view(n)
    return (s - s.mean()) / (s.std() + bn_eps)


def authors_style_dara(rewards: torch.Tensor, uids, mask: torch.Tensor, calibration: str = "positive",
                       max_weight: float = 5.0, eps: float = 1e-6) -> torch.Tensor:
    """The shape of the authors' published estimator: rows grouped by uid in
    a Python dict, each group standardised in a loop, each group's activity
    tested in a loop, then the capped density weights, the calibrated sum
    and verl's token-level whitening."""
    groups = defaultdict(list)
    for row, uid in enumerate(uids):
        groups[uid].append(row)
    groups = list(groups.values())
    z = torch.zeros_like(rewards)
    for rows in groups:
        values = rewards[rows]
        z[rows] = (values - values.mean(0)) / (values.std(0, correction=1) + eps)
    active = torch.stack([z[rows].abs().sum(0) > 1e-8 for rows in groups])
    density = active.float().mean(0)
    weights = torch.ones_like(density)
    live = density > 0
    weights[live] = (density[live].max() / density[live]).sqrt().clamp(max=max_weight)
    if calibration == "positive":
        s = (z.clamp(max=0) + weights * z.clamp(min=0)).sum(-1)
    else:
        s = (z * weights).sum(-1)
    return verl_token_whiten(s, mask)
