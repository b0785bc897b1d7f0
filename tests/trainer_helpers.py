"""Runs dara-train in a subprocess (each run owns its process group)."""
from __future__ import annotations

import subprocess
import sys
import tempfile


def run_train(*args: str, ranks: int = 1, timeout: int = 600) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
    # A neutral working directory: the installed entry point must not depend
    # on being started from the checkout.
    with tempfile.TemporaryDirectory() as neutral:
        result = subprocess.run([sys.executable, *launcher, "-m", "dara_train.cli", *args], capture_output=True,
                                text=True, timeout=timeout, cwd=neutral)
    if result.returncode != 0:
        raise AssertionError(f"dara-train {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    return result
