"""Triton backend (accumulate / finalize / apply kernels, registered as the ops of library.py)."""
from __future__ import annotations

import os
from typing import Optional

import torch


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def triton_unavailable_reason(device: torch.device) -> Optional[str]:
    try:
        import triton  # noqa: F401
    except ImportError as err:
        return f'backend="triton" is unavailable: triton is not installed ({err})'
    from .._ops import EXTENSION_ERROR

    if EXTENSION_ERROR is not None:
        # The group layout (dara::device_layout) is the compiled op the CUDA backend uses too.
        return f'backend="triton" is unavailable: {EXTENSION_ERROR}'
    if device.type == "cuda":
        return None
    if device.type == "cpu" and _interpreting():
        return None
    return (f'backend="triton" needs CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set '
            f"before triton is imported), got {device}")
