"""The group layout the Triton kernels walk: contiguous groups of group_size,
or a group_index's CSR (rows, offsets) and group count as a device scalar,
built by the compiled op dara::device_layout (csrc/device_layout.cpp), which
the CUDA backend uses too. Kernels loop over groups up to that scalar, so no
shape depends on data."""
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
    if group_index is None:
        groups = n // group_size if group_size else 0
        return DeviceLayout(None, None, torch.tensor(groups, dtype=torch.int64, device=rewards.device), group_size,
                            groups)
    rows, offsets, num_groups = torch.ops.dara.device_layout(group_index)
    return DeviceLayout(rows, offsets, num_groups, 0, n)
