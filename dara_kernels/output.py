"""The result of `fused_advantage`: advantages plus the per-reward diagnostics."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class AdvantageOutput(NamedTuple):
    advantages: torch.Tensor                  # [N] float32
    token_advantages: Optional[torch.Tensor]  # [N, T] float32, only with a response_mask
    density: torch.Tensor                     # [K] active-group density pi_k
    weights: torch.Tensor                     # [K] w_k (DVAO: mean of w_gk over groups)
    energy: torch.Tensor                      # [K] sum_j A_jk^2
    weighted_energy: torch.Tensor             # [K] sum_j (w_k A_jk)^2
    active_groups: torch.Tensor               # [K] int64
    num_groups: torch.Tensor                  # [] int64
    batch_mean: torch.Tensor                  # [] float32
    batch_std: torch.Tensor                   # [] float32
    keep: torch.Tensor                        # [N] bool
    query_scale: torch.Tensor                 # [N] float32
    informative: torch.Tensor                 # [N] bool: some reward is active in the row's group
    sum_informative: torch.Tensor             # [N] bool: the weighted summed reward varies in the row's group
    informative_groups: torch.Tensor          # [] int64: groups with an active reward
    sum_informative_groups: torch.Tensor      # [] int64: groups whose weighted summed reward varies
    conflict_groups: torch.Tensor             # [] int64: rewards active, summed reward constant


def output_from_kernel(tensors, has_mask: bool) -> AdvantageOutput:
    """Kernels return a flat tuple in field order; an empty token tensor means 'no mask'."""
    values = list(tensors)
    if not has_mask:
        values[1] = None
    return AdvantageOutput(*values)
