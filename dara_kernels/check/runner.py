"""What the check does: finds the backends that can run here (and why the
others cannot), compares each on every call against the float64 reference,
and times one call of each on the verl-shaped and the paper's batch."""
from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from ..backends import ORACLE, Backend
from ..wire import METHODS
from .batches import paper_batch, verl_shaped_batch
from .compare import Comparison, compare
from .sweeps import EDGE_SWEEPS, Call, offset_calls
from .table_sweeps import dtype_calls, k_range_calls, option_calls

TIMED_CALLS = 5


def backend_device(record: Backend) -> tuple[Optional[str], Optional[str]]:
    """(device, None) where the backend runs here, else (None, why not). A backend that runs on CUDA is
    checked on a GPU only, never in its test mode."""
    device = "cuda" if "cuda" in record.devices else record.devices[0]
    if device == "cuda" and not torch.cuda.is_available():
        why = f"torch {torch.__version__} sees no CUDA device"
        return None, why + (f" ({record.test_mode})" if record.test_mode else "")
    reason = record.unavailable(torch.device(device))
    return (None, reason) if reason else (device, None)


def check_calls(max_k: int, edges: tuple[int, ...]) -> Iterator[Call]:
    return itertools.chain(
        k_range_calls(max_k, edges), option_calls(), dtype_calls(),
        *(offset_calls(method) for method in METHODS), *(calls() for calls in EDGE_SWEEPS.values()))


@dataclass
class Failure:
    call: str
    problem: str


@dataclass
class BackendResult:
    backend: Backend
    device: str
    cases: int = 0
    skipped: int = 0  # calls over its column limit
    worst_ratio: float = 0.0  # the worst error over its tolerance
    worst_error: float = 0.0
    worst_tolerance: float = 0.0
    worst_call: str = ""
    sweep_seconds: float = 0.0  # spent in this backend's sweep calls (Triton's first compiles too)
    failures: list[Failure] = field(default_factory=list)
    timings_ms: dict[str, Optional[float]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.backend.name

    def takes(self, call: Call) -> bool:
        limit = self.backend.max_rewards
        return limit is None or call.rewards.shape[1] <= limit

    def record(self, call: Call, error: float, field_name: str, problem: Optional[str]) -> None:
        self.cases += 1
        if problem is not None:
            self.failures.append(Failure(call.describe(), problem))
            return
        tolerance = self.backend.tolerances[call.rewards.dtype]
        if error / tolerance > self.worst_ratio or not self.worst_call:
            self.worst_ratio, self.worst_error, self.worst_tolerance = error / tolerance, error, tolerance
            self.worst_call = call.describe()
        if not error <= tolerance:
            self.failures.append(Failure(call.describe(), f"{field_name} relative error {error:.3g} > {tolerance:g}"))


def _outcome(call: Call, backend: str, device: str):
    """The call's output, or what it raised (a CUDA kernel's error surfaces at the synchronisation)."""
    try:
        out = call.run(backend, device)
        if device == "cuda":
            torch.cuda.synchronize()
        return out
    except Exception as err:  # noqa: BLE001 - an error is an outcome to compare with the reference's
        return err


def _said(outcome) -> str:
    return repr(outcome) if isinstance(outcome, Exception) else "a result"


def _error(out, ref) -> Comparison:
    """compare(), for an output or an exception on either side (the same exception is a match)."""
    if isinstance(ref, Exception) or isinstance(out, Exception):
        if type(out) is type(ref) and str(out) == str(ref):
            return Comparison(0.0, "", None)
        return Comparison(math.inf, "", f"gave {_said(out)} where the reference gave {_said(ref)}")
    return compare(out, ref)


@contextlib.contextmanager
def sweep_settings():
    """For the sweep's small calls: fresh allocations filled with NaN (the
    dtype's max for integers), so that an output element a kernel forgot to
    write fails the comparison instead of passing by luck (torch's
    deterministic mode does the filling); and one CPU thread, as the
    reference's small ops on a busy machine spent up to 0.5 s a call
    waiting on their threads' barriers (K = 16 to 48 on 2 loaded cores,
    against 2 ms on one)."""
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.utils.deterministic.fill_uninitialized_memory, torch.get_num_threads())
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*deterministic")
            yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        torch.utils.deterministic.fill_uninitialized_memory = previous[2]
        torch.set_num_threads(previous[3])


def reference_outcomes(calls) -> list[tuple[Call, object]]:
    """Each call with the reference's outcome, run once and compared with every backend (the sweep's calls are
    small: holding them all costs little)."""
    return [(call, _outcome(call, ORACLE, "cpu")) for call in calls]


def compare_backend(result: BackendResult, checked: list[tuple[Call, object]]) -> None:
    """Every call within the backend's column limit against the reference's outcome."""
    for call, ref in checked:
        if not result.takes(call):
            result.skipped += 1
            continue
        start = time.perf_counter()
        out = _outcome(call, result.name, result.device)
        result.sweep_seconds += time.perf_counter() - start
        result.record(call, *_error(out, ref))


def compare_backends(results: list[BackendResult], calls) -> None:
    """Every call on every backend whose column limit it is within, against one reference run."""
    checked = reference_outcomes(calls)
    for result in results:
        compare_backend(result, checked)


def _median_ms(fn, device: str) -> float:
    def timed() -> float:
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    return 1e3 * statistics.median(timed() for _ in range(TIMED_CALLS))


TIMED_BATCHES = {"verl": verl_shaped_batch, "paper": paper_batch}


def timed_calls() -> dict[str, tuple[Call, object]]:
    """dara with verl's preset (token whitening, token_advantages) on each timed batch, with the reference's
    outcome (a few hundred MB in all, kept so that each backend finishes before the next starts)."""
    calls = {}
    for batch_name, make in TIMED_BATCHES.items():
        rewards, ids, mask = make()
        call = Call(f"{batch_name} batch", rewards, {"group_index": ids, "response_mask": mask},
                    {"method": "dara", "preset": "verl"})
        calls[batch_name] = call, _outcome(call, ORACLE, "cpu")
    return calls


def time_backend(result: BackendResult, timed: dict[str, tuple[Call, object]]) -> None:
    """Each timed call: the first compared with the reference (a case: the sweep's batches are small), then
    the median of a few more."""
    for batch_name, (call, ref) in timed.items():
        on_device = Call(call.label, call.rewards.to(result.device),
                         {k: v.to(result.device) for k, v in call.inputs.items()}, call.options)
        out = _outcome(on_device, result.name, result.device)
        result.record(call, *_error(out, ref))
        if not isinstance(out, Exception):
            result.timings_ms[batch_name] = _median_ms(lambda c=on_device: c.run(result.name, result.device),
                                                       result.device)
