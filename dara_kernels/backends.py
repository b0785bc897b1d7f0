"""Backend registry: which implementation serves a call, and why one can't.

Choosing a backend explicitly never falls back: an unavailable one raises
with the reason. "auto" picks the fastest backend that can run the call (its
device and its number of reward columns); docs/spec.md#backends.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import torch

from . import _ops
from .output import AdvantageOutput
from .reference import reference_advantage
from .wire import MAX_REWARDS

BACKENDS = ("auto", "reference", "cpu", "triton", "cuda")


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run these inputs here; the message says why."""


def _triton_reason(device: torch.device) -> Optional[str]:
    from .triton import triton_unavailable_reason

    return triton_unavailable_reason(device)


def _too_many_rewards(name: str, num_rewards: Optional[int]) -> Optional[str]:
    if num_rewards is None or num_rewards <= MAX_REWARDS[name]:
        return None
    return (f'backend="{name}" handles at most {MAX_REWARDS[name]} reward columns, got K={num_rewards}; '
            'backend="reference" handles any K')


def unavailable_reason(name: str, device: torch.device, num_rewards: Optional[int] = None) -> Optional[str]:
    """Why `name` cannot run a call on `device` with `num_rewards` columns (None: any K), or None."""
    if name == "reference":
        return None
    reason = _device_reason(name, device)
    return reason or _too_many_rewards(name, num_rewards)


def _device_reason(name: str, device: torch.device) -> Optional[str]:
    if name == "cpu":
        if not _ops.extension_available():
            return f'backend="cpu" is unavailable: {_ops.EXTENSION_ERROR}'
        if device.type != "cpu":
            return f'backend="cpu" needs CPU tensors, got {device}'
        return None
    if name == "cuda":
        if device.type != "cuda":
            return f'backend="cuda" needs CUDA tensors, got {device}'
        if not _ops.extension_available():
            return f'backend="cuda" is unavailable: {_ops.EXTENSION_ERROR}'
        if not _ops.cuda_kernels_compiled():
            return ('backend="cuda" is unavailable: dara_kernels._C was built without CUDA '
                    "(reinstall with a CUDA torch and nvcc present, or DARA_BUILD_CUDA=1)")
        return None
    if name == "triton":
        return _triton_reason(device)
    raise ValueError(f"backend={name!r} is not supported; expected one of {', '.join(BACKENDS)}")


def choose_backend(name: str, device: torch.device, num_rewards: int) -> str:
    # The common CPU call first: the search below costs a small batch about a microsecond.
    if (name == "cpu" or name == "auto") and device.type == "cpu" and num_rewards <= MAX_REWARDS["cpu"] \
            and _ops.extension_available():
        return "cpu"
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not supported; expected one of {', '.join(BACKENDS)}")
    if name != "auto":
        reason = unavailable_reason(name, device, num_rewards)
        if reason:
            raise BackendUnavailable(reason)
        return name
    candidates = ("cuda", "triton") if device.type == "cuda" else ("cpu",)
    for candidate in candidates:
        if unavailable_reason(candidate, device, num_rewards) is None:
            return candidate
    reasons = "; ".join(unavailable_reason(c, device, num_rewards) for c in candidates)
    if os.environ.get("DARA_ALLOW_REFERENCE") == "1":
        return "reference"
    raise BackendUnavailable(
        f'backend="auto" found no compiled backend for {device}: {reasons}. '
        'Pass backend="reference" (float64 PyTorch, slower) or set DARA_ALLOW_REFERENCE=1 '
        "to let auto use it.")


def runner(name: str) -> Callable[..., AdvantageOutput]:
    if name == "reference":
        return reference_advantage
    if name == "triton":
        from .triton import triton_fused_advantage

        return triton_fused_advantage
    return _ops.kernel_fused_advantage
