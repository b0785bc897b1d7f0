"""python -m dara_kernels.check: run every backend this machine has against the float64 reference.

Prints one table (backend, cases, worst error against its tolerance, time of
one call on verl's and on the paper's batch), each backend's row as soon as
that backend is done, so that a check cut short (scripts/gpu_check.sh caps
it) keeps the rows it finished. Exits 0 when every available backend matches
the reference on every call; 1 on a mismatch (each listed) or when a backend
named in --require cannot run; 2 when no compiled backend can run here.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from .. import __version__
from ..backends import backend, compiled
from .batches import PAPER_GROUP, PAPER_PROMPTS, PAPER_TOKENS, VERL_GROUP, VERL_K, VERL_PROMPTS, VERL_TOKENS
from .runner import (
    TIMED_BATCHES,
    TIMED_CALLS,
    BackendResult,
    backend_device,
    check_calls,
    compare_backend,
    reference_outcomes,
    sweep_settings,
    time_backend,
    timed_calls,
)

LISTED_FAILURES = 10


def _machine() -> str:
    cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    return f"torch {torch.__version__}, {cuda}, {torch.get_num_threads()} CPU threads"


def _row(result: BackendResult) -> str:
    verdict = "ok" if not result.failures else f"FAILED {len(result.failures)}"
    times = "".join(f"{result.timings_ms[b]:>10.2f}" if result.timings_ms.get(b) is not None else f"{'-':>10}"
                    for b in TIMED_BATCHES)
    return (f"{result.name:<8}{result.device:<6}{result.cases:>6}{result.worst_error:>12.2e}"
            f"{result.worst_tolerance:>11.0e}{verdict:>11}{result.sweep_seconds:>9.1f}{times}")


def report_head() -> str:
    head = f"{'backend':<8}{'on':<6}{'cases':>6}{'worst err':>12}{'tolerance':>11}{'result':>11}{'sweep s':>9}" + \
        "".join(f"{b + ' ms':>10}" for b in TIMED_BATCHES)
    title = f"dara-kernels {__version__} against its float64 reference ({_machine()})"
    return "\n".join([title, head, "-" * len(head)])


def report_tail(results: list[BackendResult], unavailable: dict[str, str], seconds: float) -> str:
    """What follows the rows of the backends that ran: those that cannot run here, then the notes and mismatches."""
    lines = [f"{name:<8}unavailable: {why}" for name, why in unavailable.items()]
    lines.append("")
    lines.append("worst err: the largest |out - ref| / max(1, max|ref|) over the output fields and cases, for the "
                 "case closest to its tolerance (counts and flags must be equal; tolerance by backend and reward "
                 "dtype)")
    if any(r.timings_ms for r in results):
        lines.append(f"ms: one call, dara with preset=\"verl\" (token whitening, token_advantages), median of "
                     f"{TIMED_CALLS} after a warm-up; verl = {VERL_PROMPTS} x {VERL_GROUP} responses, K = {VERL_K}, "
                     f"T = {VERL_TOKENS}, int64 mask; paper = the paper's tool-calling batch, {PAPER_PROMPTS} x "
                     f"{PAPER_GROUP}, K = 3, T = {PAPER_TOKENS}, float32 mask; shuffled uids")
    for result in results:
        if result.worst_call:
            lines.append(f"{result.name} closest to tolerance: {result.worst_call}")
        if result.skipped:
            lines.append(f"{result.name}: {result.skipped} calls over its limit of {result.backend.max_rewards} "
                         "reward columns not run")
        for failure in result.failures[:LISTED_FAILURES]:
            lines.append(f"{result.name} MISMATCH {failure.call}: {failure.problem}")
        if len(result.failures) > LISTED_FAILURES:
            lines.append(f"{result.name}: {len(result.failures) - LISTED_FAILURES} more mismatches")
    lines.append(f"checked in {seconds:.0f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    names = [b.name for b in compiled()]
    parser = argparse.ArgumentParser(prog="python -m dara_kernels.check", description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=names, default=names,
                        help="the backends to check (default: every one that can run here)")
    parser.add_argument("--require", nargs="+", choices=names, default=[],
                        help="fail unless these backends can run here")
    parser.add_argument("--no-timing", dest="timing", action="store_false", help="skip the two timed batches")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results, unavailable = [], {}
    for name in dict.fromkeys(args.backends + args.require):
        device, why = backend_device(backend(name))
        if device is None:
            unavailable[name] = why
        else:
            results.append(BackendResult(backend(name), device))
    print(report_head(), flush=True)
    if results:
        edges = tuple(sorted({1, *(r.backend.max_rewards for r in results)}))
        with sweep_settings():
            checked = reference_outcomes(check_calls(max(edges), edges))
        timed = timed_calls() if args.timing else {}
        for result in results:
            with sweep_settings():
                compare_backend(result, checked)
            time_backend(result, timed)
            print(_row(result), flush=True)
    print(report_tail(results, unavailable, time.perf_counter() - start))
    if not results:
        print("no compiled backend can run here: nothing was checked", file=sys.stderr)
        return 2
    missing = [name for name in args.require if name in unavailable]
    if missing:
        print(f"required but unavailable: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing or any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
