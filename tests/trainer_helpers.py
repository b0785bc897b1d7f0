"""Runs dara-train in a subprocess (each run owns its process group)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_train(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-m", "trainer.cli", *args], capture_output=True, text=True,
                            timeout=timeout, env=env, cwd=REPO)
    if result.returncode != 0:
        raise AssertionError(f"dara-train {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    return result
