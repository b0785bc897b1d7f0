"""The group layout the Triton kernels walk: contiguous groups of group_size
(their count a kernel argument), or a group_index's CSR (rows, offsets) and
group count as a device scalar, built by the compiled op dara::device_layout
(csrc/device_layout.cpp), which the CUDA backend uses too. Kernels loop over
groups up to that count, so no shape depends on data and nothing is copied
from the host: a host value put in a device tensor would be a copy and a
stream synchronisation on every call, and an error in CUDA-graph capture."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class DeviceLayout:
    rows: Optional[torch.Tensor]        # [N] int64 row of each sorted position, None if contiguous
    offsets: Optional[torch.Tensor]     # [N + 1] int64 start of each group (N past the last), None if contiguous
    num_groups: Optional[torch.Tensor]  # [] int64 on the device, None if contiguous
    group_size: int                     # G for contiguous layouts, else 0
    max_groups: int                     # the group count if contiguous, else its upper bound N


def device_layout(rewards: torch.Tensor, group_size: int, group_index: Optional[torch.Tensor]) -> DeviceLayout:
    n = rewards.shape[0]
    if group_index is None:
        return DeviceLayout(None, None, None, group_size, n // group_size if group_size else 0)
    rows, offsets, num_groups = torch.ops.dara.device_layout(group_index)
    return DeviceLayout(rows, offsets, num_groups, 0, n)
