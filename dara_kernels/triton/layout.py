"""Group layout on the device without host synchronisation: a stable sort of
group_index into CSR (rows, offsets) and the group count as a device scalar.
Kernels loop over groups up to that scalar, so no shape depends on data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class DeviceLayout:
    rows: Optional[torch.Tensor]     # [N] int64 row of each sorted position, None if contiguous
    offsets: Optional[torch.Tensor]  # [N + 1] int64 start of each group (N past the last)
    num_groups: torch.Tensor         # [] int64 on the device
    group_size: int                  # G for contiguous layouts, else 0
    max_groups: int                  # host-side upper bound on the group count


def device_layout(rewards: torch.Tensor, group_size: int, group_index: Optional[torch.Tensor]) -> DeviceLayout:
    n = rewards.shape[0]
    device = rewards.device
    if group_index is None:
        groups = n // group_size if group_size else 0
        return DeviceLayout(None, None, torch.tensor(groups, dtype=torch.int64, device=device), group_size, groups)
    sorted_ids, rows = torch.sort(group_index, stable=True)
    starts = torch.ones(n, dtype=torch.bool, device=device)
    starts[1:] = sorted_ids[1:] != sorted_ids[:-1]
    segment = torch.cumsum(starts.to(torch.int64), 0) - 1
    offsets = torch.full((n + 1,), n, dtype=torch.int64, device=device)
    positions = torch.arange(n, dtype=torch.int64, device=device)
    offsets.scatter_reduce_(0, segment, positions, reduce="amin", include_self=True)
    num_groups = segment[-1] + 1 if n else torch.zeros((), dtype=torch.int64, device=device)
    return DeviceLayout(rows, offsets, num_groups, 0, n)
