"""Test-wide set-up.

- The Triton interpreter runs only where there is no CUDA device (or when
  DARA_TRITON_INTERPRET=1 asks for it): on a GPU the Triton tests run the
  compiled kernels. It must be decided before anything imports triton.
- The compiled extension must be there: a missing build would otherwise skip
  every kernel test and pass. Only the documented pure-Python install
  (DARA_NO_EXTENSION=1) runs without it, and says so in the report header.
- Every fresh allocation (torch.empty, at::empty in the C++ kernels) is
  filled with NaN (floats) or the dtype's max (ints), so an output element a
  kernel forgot to write fails the comparison instead of passing by luck.
"""
import os

import pytest
import torch


def interpreter_wanted() -> bool:
    asked = os.environ.get("DARA_TRITON_INTERPRET")
    if asked is not None:
        return asked == "1"
    return not torch.cuda.is_available()


if interpreter_wanted():
    os.environ["TRITON_INTERPRET"] = "1"
else:
    os.environ.pop("TRITON_INTERPRET", None)


def pytest_configure(config):
    import dara_kernels

    if not dara_kernels.extension_available() and os.environ.get("DARA_NO_EXTENSION") != "1":
        from dara_kernels._ops import EXTENSION_ERROR

        raise pytest.UsageError(
            f"{EXTENSION_ERROR}. Build it first (pip install --no-build-isolation -e .), "
            "or set DARA_NO_EXTENSION=1 to test a pure-Python install.")


def pytest_report_header(config):
    import dara_kernels

    triton_mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled"
    extension = "built" if dara_kernels.extension_available() else "MISSING: kernel tests skip"
    return f"dara-kernels: extension {extension}; triton {triton_mode}"


@pytest.fixture(autouse=True)
def nan_filled_allocations():
    previous = (torch.are_deterministic_algorithms_enabled(),
                torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(previous[0])
    torch.utils.deterministic.fill_uninitialized_memory = previous[1]
