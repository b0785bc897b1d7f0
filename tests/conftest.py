"""Every fresh allocation (torch.empty, at::empty in the C++ kernels) is
filled with NaN (floats) or the dtype's max (ints) during tests, so an output
element a kernel forgot to write fails the comparison instead of passing by
luck."""
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def nan_filled_allocations():
    previous = (torch.are_deterministic_algorithms_enabled(),
                torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(previous[0])
    torch.utils.deterministic.fill_uninitialized_memory = previous[1]


def pytest_configure(config):
    """In CI the extension must be there: a missing build would otherwise skip
    every kernel test and pass."""
    if os.environ.get("DARA_REQUIRE_EXTENSION") == "1":
        import dara_kernels

        if not dara_kernels.extension_available():
            from dara_kernels._ops import EXTENSION_ERROR

            raise pytest.UsageError(f"DARA_REQUIRE_EXTENSION=1 but {EXTENSION_ERROR}")
