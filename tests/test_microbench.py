"""benchmarks/microbench.py as a user runs it: `--quick` to the end with a row
for every backend, and an implementation that fails or cannot run is a row
saying why while the run goes on."""
import json
import pathlib
import re
import subprocess
import sys

import pytest

import dara_kernels as dk

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")


@pytest.fixture
def microbench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import microbench

    return microbench


def test_quick_run_has_a_row_for_every_backend(tmp_path):
    """The slow baselines (torch.compile, the verl-style loop) are left out: they cost a minute here."""
    out = tmp_path / "quick.json"
    done = subprocess.run([sys.executable, "benchmarks/microbench.py", "--quick", "--no-compile-baseline",
                           "--max-verl-n", "0", "--budget", "0.05", "--max-repeats", "3", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2
    for row in rows:
        assert set(row["seconds"]) == {"cpu", "reference"} and not row["failed"] and not row["unavailable"], row
        table_row = f"{row['n']:>10} {row['k']:>2} {row['g']:>3} {row['method']:<10} {row['layout']:<8} cpu "
        assert table_row in done.stdout


def _quick(microbench, monkeypatch, capsys, impls):
    monkeypatch.setattr(microbench, "copy_bandwidth", lambda device: 1e10)
    monkeypatch.setattr(microbench, "implementations", lambda *args: impls)
    status = microbench.main(["--quick", "--budget", "0", "--max-repeats", "1"])
    return status, capsys.readouterr().out


def test_a_failing_baseline_is_a_row_and_the_run_goes_on(microbench, monkeypatch, capsys):
    def inductor_fails():
        raise AssertionError("\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace")

    status, out = _quick(microbench, monkeypatch, capsys, {"cpu": lambda: None, "reference": inductor_fails})
    assert status == 0
    assert out.count("reference          failed: AssertionError: Set TORCHDYNAMO_VERBOSE=1") == 2
    # Each config's cpu row, its speedup over the reference marked as failed.
    assert len(re.findall(r" cpu +[\d.]+ +[\d.]+% +failed ", out)) == 2


@pytest.mark.parametrize("cpu", [lambda: 1 / 0, "cannot run here"], ids=["fails", "unavailable"])
def test_a_backend_that_did_not_run_fails_the_run(microbench, monkeypatch, capsys, cpu):
    status, out = _quick(microbench, monkeypatch, capsys, {"cpu": cpu, "reference": lambda: None})
    assert status == 1
    assert out.count("cpu                failed: ZeroDivisionError" if callable(cpu) else
                     "cpu                unavailable: cannot run here") >= 2
