"""Backend registry: one record per backend, read by the op, distributed mode
and the check. A record says where its backend runs, why it cannot run here,
how it runs a call, how many reward columns it takes, and how close to the
reference it is held.

Choosing a backend explicitly never falls back: an unavailable one raises
with the reason. "auto" picks the first registered backend for the
tensors' device that can run the call (its device and its number of reward
columns); docs/spec.md#backends. Adding a backend: docs/architecture.md.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional

import torch

from . import _ops
from .output import AdvantageOutput
from .reference import reference_advantage
from .triton import library as triton_library


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run these inputs here; the message says why."""


@dataclass(frozen=True)
class Backend:
    """One backend.

    run(inputs, opts) computes one call; a backend that `accumulates` also
    takes run(inputs, opts, reduce), which combines its accumulators with the
    other ranks' between accumulate and finalize (distributed mode; the
    reference has no such stage). `unavailable(device)` says why it cannot
    run on that device here (None where it can). `devices`: the device types
    "auto" and the check run it on. `max_rewards`: the reward columns it
    takes (None: any); a backend whose kernels live in csrc/<name> sizes its
    per-reward arrays by it (kMax<Name>Rewards, written by
    scripts/generate_wire.py), Triton its lanes (triton/generated_tables.py's
    MAX_REWARDS). `tolerances`: |out - ref| / max(1, max|ref|) by reward
    dtype (None for the reference itself). `kernel_checks_infinite`: its
    kernel finds a +-Inf reward in its own pass, so prepare_inputs need not.
    `test_mode`: how this package's tests run it without its device, which
    the check does not use."""
    name: str
    devices: tuple[str, ...]
    unavailable: Callable[[torch.device], Optional[str]]
    run: Callable[..., AdvantageOutput]
    max_rewards: Optional[int]
    tolerances: Optional[Mapping[torch.dtype, float]]
    kernel_checks_infinite: bool = False
    auto: bool = True
    accumulates: bool = True
    test_mode: str = ""


def _same_everywhere(tolerance: float) -> dict:
    return {dtype: tolerance for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16)}


def _extension_reason(name: str) -> Optional[str]:
    return None if _ops.extension_available() else f'backend="{name}" is unavailable: {_ops.EXTENSION_ERROR}'


def _cpu_reason(device: torch.device) -> Optional[str]:
    reason = _extension_reason("cpu")
    if reason is None and device.type != "cpu":
        reason = f'backend="cpu" needs CPU tensors, got {device}'
    return reason


def _cuda_reason(device: torch.device) -> Optional[str]:
    if device.type != "cuda":
        return f'backend="cuda" needs CUDA tensors, got {device}'
    reason = _extension_reason("cuda")
    if reason is None and not _ops.CUDA_KERNELS_COMPILED:
        reason = ('backend="cuda" is unavailable: dara_kernels._C was built without CUDA '
                  "(reinstall with a CUDA torch and nvcc present, or DARA_BUILD_CUDA=1)")
    return reason


def _triton_reason(device: torch.device) -> Optional[str]:
    from .triton import triton_unavailable_reason

    return triton_unavailable_reason(device)


# CPU accumulates in float64 for every input dtype: only the float32 output rounds.
_CPU_TOLERANCES = {torch.float64: 2e-6, torch.float32: 1e-5, torch.bfloat16: 1e-5, torch.float16: 1e-5}

# The float64 PyTorch oracle every other backend is compared against (the check, the tests).
ORACLE = "reference"

# In "auto" order for each device type.
_REGISTRY: dict[str, Backend] = {b.name: b for b in (
    Backend(ORACLE, ("cpu", "cuda"), lambda device: None, reference_advantage, None, None, auto=False,
            accumulates=False),
    # 64 and 16: the kernels keep per-reward state in arrays of that size (csrc/cpu, csrc/cuda).
    Backend("cpu", ("cpu",), _cpu_reason, _ops.kernel_runner(), 64, _CPU_TOLERANCES,
            kernel_checks_infinite=True),
    Backend("cuda", ("cuda",), _cuda_reason, _ops.kernel_runner(), 16, _same_everywhere(1e-4)),
    # 16: a reward row in one power-of-two block of lanes, 32 with positive calibration's extra column.
    Backend("triton", ("cuda",), _triton_reason, _ops.kernel_runner(triton_library.LIBRARY), 16,
            _same_everywhere(1e-4),
            test_mode="the Triton interpreter on CPU is for the package's tests, not this check"),
)}
BACKENDS = ("auto", *_REGISTRY)


def backend(name: str) -> Backend:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"backend={name!r} is not supported; expected one of {', '.join(BACKENDS)}") from None


def registered() -> tuple[Backend, ...]:
    return tuple(_REGISTRY.values())


def compiled() -> tuple[Backend, ...]:
    """Every registered backend but the oracle: what the check compares with it."""
    return tuple(b for b in _REGISTRY.values() if b.name != ORACLE)


def compiled_for(device_type: str) -> tuple[str, ...]:
    """The names of those that run on `device_type`, in "auto" order (the benchmarks' default)."""
    return tuple(b.name for b in compiled() if device_type in b.devices)


@contextlib.contextmanager
def registered_for_tests(record: Backend) -> Iterator[Backend]:
    """`record` in the registry for the duration (a test harness's backend, never a public one)."""
    if record.name in _REGISTRY or record.name == "auto":
        raise ValueError(f"backend {record.name!r} is already registered")
    _REGISTRY[record.name] = record
    try:
        yield record
    finally:
        del _REGISTRY[record.name]


def _too_many_rewards(record: Backend, num_rewards: Optional[int]) -> Optional[str]:
    if num_rewards is None or record.max_rewards is None or num_rewards <= record.max_rewards:
        return None
    return (f'backend="{record.name}" handles at most {record.max_rewards} reward columns, got K={num_rewards}; '
            'backend="reference" handles any K')


def unavailable_reason(name: str, device: torch.device, num_rewards: Optional[int] = None) -> Optional[str]:
    """Why `name` cannot run a call on `device` with `num_rewards` columns (None: any K), or None."""
    record = backend(name)
    return record.unavailable(device) or _too_many_rewards(record, num_rewards)


def choose_backend(name: str, device: torch.device, num_rewards: int) -> Backend:
    # The common CPU call first: the search below costs a small batch about a microsecond.
    cpu = _REGISTRY["cpu"]
    if (name == "cpu" or name == "auto") and device.type == "cpu" and num_rewards <= cpu.max_rewards \
            and _ops.extension_available():
        return cpu
    if name != "auto":
        record = backend(name)
        reason = unavailable_reason(name, device, num_rewards)
        if reason:
            raise BackendUnavailable(reason)
        return record
    candidates = [b for b in _REGISTRY.values() if b.auto and device.type in b.devices]
    for candidate in candidates:
        if unavailable_reason(candidate.name, device, num_rewards) is None:
            return candidate
    reasons = "; ".join(unavailable_reason(c.name, device, num_rewards) for c in candidates)
    if os.environ.get("DARA_ALLOW_REFERENCE") == "1":
        return _REGISTRY[ORACLE]
    raise BackendUnavailable(
        f'backend="auto" found no compiled backend for {device}: {reasons}. '
        'Pass backend="reference" (float64 PyTorch, slower) or set DARA_ALLOW_REFERENCE=1 '
        "to let auto use it.")
