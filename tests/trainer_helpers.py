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


def run_two_steps(out, *args, ranks=1, engine="vllm") -> list[dict]:
    """Two steps, evaluated on 4 prompts at steps 0 and 2: the metrics without the timings."""
    from dara_train.metrics import read_metrics

    run_train(*args, "--steps", "2", "--output-dir", str(out), "--set", "task.eval_size=4", "--set", "eval_every=2",
              ranks=ranks)
    assert f"engine: {engine}" in (out / "config.yaml").read_text()
    records = read_metrics(out)
    assert [r["step"] for r in records if "time/rollout" in r] == [1, 2]
    assert [r["step"] for r in records if "eval/correct" in r] == [0, 2]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]
