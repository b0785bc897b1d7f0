"""scripts/gpu_check.sh, the one run a lent GPU machine gives this package, rehearsed here without a GPU
(GPU_CHECK_REHEARSAL=1: each step's command a CPU stand-in): every step's outcome reaches the summary, a step
cut short at its cap keeps what it printed, and what the device tool brings back holds every file."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import dara_kernels as dk

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
# What the device tool brings back from $OUT (its README): 8 files, named so, at most 2 folders down.
MOST_FILES = 8
ALLOWED_NAME = re.compile(r"[A-Za-z0-9._-]+")
MOST_FOLDERS = 2
# The device tool's limit on a command, and what the machine's own start needs beside it.
DEVICE_COMMAND_SECONDS = 600
START_SECONDS = 20

pytestmark = [
    pytest.mark.skipif(not dk.extension_available(), reason="extension not built: the rehearsal loads its cpu "
                       "backend as the real run loads the cuda one"),
    pytest.mark.skipif(shutil.which("timeout") is None, reason="the script caps its steps with GNU timeout"),
]


def _run(out: Path, **env) -> tuple[subprocess.CompletedProcess, float]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    environment.update(OUT=str(out), PYTHON=sys.executable, **env)
    start = time.monotonic()
    done = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300)
    return done, time.monotonic() - start


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-out")
    done, seconds = _run(out, GPU_CHECK_REHEARSAL="1")
    return out, done, seconds


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """Here, without a GPU, the real run stops at its prerequisites or at the CUDA device, before any step."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU the real run would start a build")
    out = tmp_path_factory.mktemp("gpu-out")
    done, _ = _run(out)
    return out, done


def _plan(stdout: str) -> tuple[int, int]:
    """The run's deadline and the least time its caps leave the microbenchmark, from the script's plan line."""
    plan = re.search(r"plan: deadline (\d+)s;.* leave the microbenchmark at least (-?\d+)s", stdout)
    assert plan, f"expected the plan line in the script's output:\n{stdout}"
    return int(plan.group(1)), int(plan.group(2))


def _outcomes(summary: str) -> dict[str, str]:
    return dict(re.findall(r"^(build|check|tests|acceptance|microbench|targets): (.*)$", summary, re.MULTILINE))


def _verdict(outcome: str) -> str:
    return re.match(r"pass|FAILED|TIMED OUT|skipped|not run|", outcome).group()


def test_every_step_outcome_is_in_the_summary(rehearsal):
    out, done, _ = rehearsal
    summary = (out / "summary.txt").read_text()
    verdicts = {step: _verdict(outcome) for step, outcome in _outcomes(summary).items()}
    expected = {"build": "pass", "check": "TIMED OUT", "tests": "TIMED OUT", "acceptance": "pass",
                "microbench": "pass", "targets": "FAILED"}
    assert verdicts == expected, f"expected the outcomes {expected} in summary.txt:\n{summary}"
    assert done.returncode == 1, f"expected exit 1 (steps failed), got {done.returncode}:\n{done.stdout}"


def test_the_tests_cut_short_print_their_failures(rehearsal):
    """timeout sends SIGINT, on which pytest prints the failures so far (on SIGTERM it prints none)."""
    log = (rehearsal[0] / "tests.log").read_text()
    assert re.search(r"^FAILED .*test_rehearsal.py::test_that_fails", log, re.MULTILINE), \
        f"expected pytest's summary line of the failed test in tests.log:\n{log}"
    assert "AssertionError: this failure must be in the log" in log, f"expected the failure in tests.log:\n{log}"


def test_the_check_cut_short_keeps_the_rows_it_finished(rehearsal):
    out = rehearsal[0]
    for name in ("check.log", "summary.txt"):
        text = (out / name).read_text()
        assert re.search(r"^cpu +cpu +4 +\S+ +\S+ +ok ", text, re.MULTILINE), \
            f"expected the finished cpu backend's row in {name}:\n{text}"
        assert not re.search(r"^stuck ", text, re.MULTILINE), f"expected no row of the stuck backend in {name}"


def test_every_file_comes_back_from_the_device(rehearsal):
    out = rehearsal[0]
    files = [path.relative_to(out) for path in out.rglob("*") if path.is_file()]
    assert len(files) <= MOST_FILES, f"expected at most {MOST_FILES} files under $OUT, got {sorted(files)}"
    assert Path("summary.txt") in files, f"expected summary.txt under $OUT, got {sorted(files)}"
    for path in files:
        assert all(ALLOWED_NAME.fullmatch(part) for part in path.parts), f"{path}: a name the tool leaves out"
        assert len(path.parts) - 1 <= MOST_FOLDERS, f"{path}: more than {MOST_FOLDERS} folders down"


def test_the_run_fits_its_deadline(rehearsal):
    out, _, seconds = rehearsal
    summary = (out / "summary.txt").read_text()
    total = re.search(r"^done in \d+s of (\d+)s", summary, re.MULTILINE)
    assert total, f"expected the run's deadline in summary.txt:\n{summary}"
    assert seconds <= int(total.group(1)), f"the rehearsal took {seconds:.0f} s, over its {total.group(1)} s"
    assert _plan(rehearsal[1].stdout)[1] >= 0, "the rehearsal's caps add up to more than its deadline"
    cut_short = re.findall(r"^(\w+): TIMED OUT in (\d+)s \(cap (\d+)s\)$", summary, re.MULTILINE)
    assert cut_short, f"expected the steps that timed out, with their times, in summary.txt:\n{summary}"
    for step, took, cap in cut_short:
        assert int(took) <= int(cap), f"{step} ran {took} s, over its cap of {cap} s"


def test_the_real_run_fits_the_device_tools_limit(stopped_run):
    """Every step at its cap, the real run still ends within the device tool's limit on a command."""
    deadline, microbench_seconds = _plan(stopped_run[1].stdout)
    assert deadline <= DEVICE_COMMAND_SECONDS - START_SECONDS, \
        f"a deadline of {deadline} s leaves the machine's start less than {START_SECONDS} s of the tool's limit"
    assert microbench_seconds >= 0, f"the caps add up to {-microbench_seconds} s over the deadline"


def test_a_run_stopped_before_its_steps_still_writes_the_summary(stopped_run):
    out, done = stopped_run
    summary = (out / "summary.txt").read_text()
    assert done.returncode == 1, f"expected exit 1, got {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert re.search(r"^stopped: (missing on this machine|torch sees no CUDA device)", summary, re.MULTILINE), \
        f"expected why the run stopped in summary.txt:\n{summary}"
    assert set(_outcomes(summary).values()) == {"not run"}, f"expected every step not run:\n{summary}"
