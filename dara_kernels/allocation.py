"""Tensors allocated from the declarations in wire.py, as the C++ bindings
allocate them from the same tables (csrc/allocation.h): the op's outputs (the
Triton driver, and the fake kernels torch.compile traces with) and the
per-group table accumulate leaves for apply (the Triton driver)."""
from __future__ import annotations

from typing import Optional

import torch

from .wire import GROUP_TABLE, OUTPUT_FIELDS, group_field_size

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "bool": torch.bool,
          "uint8": torch.uint8}


def _shape(extent: str, n: int, k: int, t: Optional[int]) -> tuple[int, ...]:
    return {"N": (n,), "NT": (n, t) if t is not None else (0,), "K": (k,), "": ()}[extent]


def empty_outputs(n: int, k: int, t: Optional[int], device: torch.device) -> dict[str, torch.Tensor]:
    """Every output by name, in wire.OUTPUT_FIELDS order; t: the response mask's width, None without one."""
    return {name: torch.empty(_shape(extent, n, k, t), dtype=DTYPES[dtype], device=device)
            for name, extent, dtype in OUTPUT_FIELDS}


def empty_group_table(groups: int, k: int, method: str, device: torch.device) -> dict[str, torch.Tensor]:
    """The per-group table's arrays by name (wire.GROUP_TABLE)."""
    return {f.name: torch.empty(group_field_size(f, groups, k, method), dtype=DTYPES[f.dtype], device=device)
            for f in GROUP_TABLE}
