"""CI smoke of the learning-speed experiment: 2 seeds of DARA and GDPO for a
few steps, then the same command again, which must resume instead of rerun.
The experiment's numbers are in benchmarks/LEARNING.md, not asserted here."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "learning_speed.py"


def load_script():
    spec = importlib.util.spec_from_file_location("learning_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sign_test_is_exact_and_two_sided():
    p = load_script().sign_test_p
    assert p(10, 0) == p(0, 10) == pytest.approx(2 / 1024)
    assert p(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert p(5, 5) == 1.0 and p(0, 0) == 1.0


def test_smoke_two_seeds_few_steps_then_resume(tmp_path):
    results, png = tmp_path / "runs.json", tmp_path / "curves.png"
    command = [sys.executable, str(SCRIPT), "--preset", "toy", "--seeds", "2", "--methods", "dara,gdpo",
               "--steps", "10", "--jobs", "2", "--json", str(results), "--plot", str(png)]
    # Outside the checkout, so the installed packages are imported (as in tests/trainer_helpers.py).
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = json.loads(results.read_text())["runs"]
    assert sorted((r["method"], r["seed"]) for r in runs) == [("dara", 0), ("dara", 1), ("gdpo", 0), ("gdpo", 1)]
    for run in runs:
        steps = [r["step"] for r in run["records"] if "reward/format/mean" in r]
        assert steps == list(range(1, 11))
        assert {"density/format", "weight/format", "eval/correct"} <= set().union(*run["records"])
    for row in ("| dara | 2 |", "| gdpo | 2 |", "| gdpo | 0-"):
        assert row in first.stdout, first.stdout
    assert "sign-test p" in first.stdout and png.stat().st_size > 1000

    again = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "all 4 runs are already in" in again.stderr
    assert again.stdout.split("runs:")[0] == first.stdout.split("runs:")[0]
