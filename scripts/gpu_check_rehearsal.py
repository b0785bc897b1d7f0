"""CPU stand-ins for the steps of scripts/gpu_check.sh that hang until their cap in its rehearsal
(GPU_CHECK_REHEARSAL=1), so that the script's handling of a timed-out step runs without a GPU:

    python scripts/gpu_check_rehearsal.py check        the real check's main on a few calls: the cpu backend,
                                                       then a backend whose first call never returns
    python scripts/gpu_check_rehearsal.py tests DIR    writes DIR/test_rehearsal.py (one test that fails, one
                                                       that never returns) for a real pytest run
"""
from __future__ import annotations

import itertools
import sys
import time
from dataclasses import replace
from pathlib import Path

REHEARSAL_TESTS = '''\
import time


def test_that_fails():
    assert 1 + 1 == 3, "this failure must be in the log of a run cut short"


def test_that_never_returns():
    time.sleep(3600)
'''


def never_returns(*args, **kwargs):
    time.sleep(3600)


def check() -> int:
    from dara_kernels import backends
    from dara_kernels.check import __main__ as check_main
    from dara_kernels.check.table_sweeps import option_calls

    check_main.check_calls = lambda max_k, edges: itertools.islice(option_calls(), 4)
    with backends.registered_for_tests(replace(backends.backend("cpu"), name="stuck", run=never_returns)):
        return check_main.main(["--no-timing", "--backends", "cpu", "stuck"])


def write_tests(folder: str) -> int:
    Path(folder, "test_rehearsal.py").write_text(REHEARSAL_TESTS)
    return 0


if __name__ == "__main__":
    stand_ins = {"check": check, "tests": write_tests}
    if len(sys.argv) < 2 or sys.argv[1] not in stand_ins:
        sys.exit(f"usage: {sys.argv[0]} check | tests DIR (got {sys.argv[1:]})")
    sys.exit(stand_ins[sys.argv[1]](*sys.argv[2:]))
