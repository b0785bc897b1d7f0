"""`python -m dara_kernels.check`, the check a user runs after installing: it
passes here, needs nothing from the tests, takes its sweep from the tables,
and fails on a wrong, missing or unwritten output."""
import itertools
import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import dara_kernels as dk
from dara_kernels import backends
from dara_kernels.check import __main__ as check_main
from dara_kernels.check import runner, sweeps
from dara_kernels.check.cases import make_case
from dara_kernels.check.table_sweeps import dtype_calls, k_range_calls, option_calls
from dara_kernels.wire import OPTION_NAMES, PRESETS

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="extension not built")

# Neither pytest nor the test suite can be imported: the check runs from an installed package.
AS_INSTALLED = ("import runpy, sys; sys.modules['pytest'] = sys.modules['tests'] = None; "
                "runpy.run_module('dara_kernels.check', run_name='__main__', alter_sys=True)")


def test_check_passes_here_as_a_user_runs_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    done = subprocess.run([sys.executable, "-c", AS_INSTALLED], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    cpu = re.search(r"^cpu +cpu +(\d+) +\S+ +\S+ +ok ", done.stdout, re.MULTILINE)
    assert cpu and int(cpu.group(1)) > 500, done.stdout
    if not torch.cuda.is_available():
        assert re.search(r"^cuda +unavailable: torch .* sees no CUDA device$", done.stdout, re.MULTILINE)
        assert re.search(r"^triton +unavailable: .*interpreter", done.stdout, re.MULTILINE)


def _few_calls(max_k, edges):
    return itertools.islice(option_calls(), 4)


def _run_check(monkeypatch, capsys, wrong=None, argv=("--no-timing",)):
    """The check on a few calls, the CPU backend's output passed through `wrong`; with the test suite's
    NaN-filled allocations off, so that the check's own are what is tested."""
    torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(check_main, "check_calls", _few_calls)
    if wrong is not None:
        real = sweeps.fused_advantage

        def altered(rewards, backend, **kwargs):
            out = real(rewards, backend=backend, **kwargs)
            return wrong(out) if backend == "cpu" else out

        monkeypatch.setattr(sweeps, "fused_advantage", altered)
    status = check_main.main(list(argv))
    return status, capsys.readouterr().out


def test_a_matching_backend_passes(monkeypatch, capsys):
    status, out = _run_check(monkeypatch, capsys)
    assert status == 0 and "MISMATCH" not in out


@pytest.mark.parametrize("wrong, problem", [
    (lambda out: out._replace(advantages=out.advantages * 1.001), "advantages relative error"),
    (lambda out: out._replace(advantages=torch.full_like(out.advantages, float("nan"))), "advantages has NaN"),
    (lambda out: out._replace(advantages=out.advantages.index_fill(0, torch.tensor([3]), float("nan"))),
     "advantages has NaN where the reference has none"),
    (lambda out: out._replace(active_groups=out.active_groups + 1), "active_groups differs"),
    (lambda out: out._replace(weights=None), "weights missing"),
], ids=["error", "nan", "one-nan", "count", "missing"])
def test_a_wrong_output_fails_the_check(monkeypatch, capsys, wrong, problem):
    status, out = _run_check(monkeypatch, capsys, wrong)
    assert status == 1 and "cpu MISMATCH" in out and problem in out, out


def test_the_sweep_fills_fresh_memory_with_nan():
    """So that an output element a kernel does not write shows as NaN (a mismatch)."""
    torch.use_deterministic_algorithms(False)
    torch.zeros(12345)  # its freed block, which the next allocation of its size reuses, holds zeros
    with runner.sweep_settings():
        assert torch.empty(12345).isnan().all()


def test_an_error_where_the_reference_answers_fails_the_check(monkeypatch, capsys):
    def fail(out):
        raise RuntimeError("kernel launch failed")

    status, out = _run_check(monkeypatch, capsys, fail)
    assert status == 1 and "gave RuntimeError('kernel launch failed') where the reference gave a result" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA can run here")
def test_a_required_backend_that_cannot_run_fails_the_check(monkeypatch, capsys):
    status, out = _run_check(monkeypatch, capsys, argv=("--no-timing", "--require", "cuda"))
    assert status == 1 and "cuda    unavailable" in out


def test_the_sweep_comes_from_the_tables():
    """Every method, every option (each sample value of its kind's row,
    wire.OPTION_KINDS), every preset, every K up to the widest limit."""
    seen = {(name, repr(value)) for call in option_calls() for name, value in call.options.items()}
    assert {name for name, _ in seen} >= set(OPTION_NAMES) | {"method", "preset"}
    assert {value for name, value in seen if name == "method"} == {repr(m) for m in dk.METHODS}
    assert {value for name, value in seen if name == "preset"} == {repr(p) for p in PRESETS}
    ks = {call.rewards.shape[1] for call in k_range_calls(64, (1, 16, 64))}
    assert ks == set(range(1, 65))
    assert {call.options["method"] for call in dtype_calls()} == set(dk.METHODS)


def test_the_check_runs_every_edge_sweep():
    """check_calls takes every sweep of sweeps.EDGE_SWEEPS, and that list holds every sweep of sweeps.py that
    needs no argument (offset_calls, per method, is the one the check and the tests call by hand)."""
    import inspect

    labels = [call.describe() for call in runner.check_calls(1, (1,))]
    for name, calls in sweeps.EDGE_SWEEPS.items():
        assert all(call.describe() in labels for call in calls()), name
    argument_free = {f for name, f in vars(sweeps).items() if name.endswith("_calls") and inspect.isfunction(f)
                     and all(p.default is not p.empty for p in inspect.signature(f).parameters.values())}
    assert argument_free - {sweeps.offset_calls} == set(sweeps.EDGE_SWEEPS.values())


def _fake_backend(name="fake", wrong=None, max_rewards=None):
    """A backend record that is the CPU backend, its output passed through `wrong`."""
    cpu = backends.backend("cpu")

    def run(inputs, opts, reduce=None):
        out = cpu.run(inputs, opts, reduce)
        return wrong(out) if wrong is not None else out

    return replace(cpu, name=name, run=run, max_rewards=max_rewards or cpu.max_rewards)


def test_one_failing_backend_beside_a_passing_one_fails_the_check(monkeypatch, capsys):
    wrong = _fake_backend(wrong=lambda out: out._replace(advantages=out.advantages * 1.001))
    with backends.registered_for_tests(wrong):
        status, out = _run_check(monkeypatch, capsys, argv=("--no-timing", "--backends", "cpu", "fake"))
    assert status == 1 and "fake MISMATCH" in out and "cpu MISMATCH" not in out, out


def test_a_nan_in_the_reference_alone_fails_the_check(monkeypatch, capsys):
    """The error would be NaN, which no tolerance comparison fails: the NaN itself is the mismatch."""
    torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(check_main, "check_calls", _few_calls)
    real = sweeps.fused_advantage

    def nan_reference(rewards, backend, **kwargs):
        out = real(rewards, backend=backend, **kwargs)
        return out._replace(advantages=torch.full_like(out.advantages, float("nan"))) if backend == "reference" \
            else out

    monkeypatch.setattr(sweeps, "fused_advantage", nan_reference)
    status = check_main.main(["--no-timing"])
    out = capsys.readouterr().out
    assert status == 1 and "advantages has NaN missing where the reference has NaN" in out, out


def test_a_nan_error_is_a_failure():
    result = runner.BackendResult(backends.backend("cpu"), "cpu")
    call = next(option_calls())
    result.record(call, float("nan"), "advantages", None)
    assert len(result.failures) == 1 and "relative error nan" in result.failures[0].problem


def _calls_of_width(*ks):
    def calls(max_k, edges):
        for k in ks:
            case = make_case(k, "fixed", k, shape=(16, 4))
            yield sweeps.Call(f"K={k}", case.rewards, case.layout, {"method": "gdpo"})
    return calls


def test_a_backend_runs_every_call_up_to_its_column_limit(monkeypatch, capsys):
    torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(check_main, "check_calls", _calls_of_width(2, 3, 4, 5))
    narrow = _fake_backend(name="narrow", max_rewards=3)
    with backends.registered_for_tests(narrow):
        status = check_main.main(["--no-timing", "--backends", "narrow"])
    out = capsys.readouterr().out
    row = re.search(r"^narrow +cpu +(\d+) ", out, re.MULTILINE)
    assert status == 0 and row and int(row.group(1)) == 2, out
    assert "narrow: 2 calls over its limit of 3 reward columns not run" in out, out


def test_the_check_takes_its_backends_from_the_registry(monkeypatch, capsys):
    with backends.registered_for_tests(_fake_backend(name="extra")):
        status, out = _run_check(monkeypatch, capsys, argv=("--no-timing", "--backends", "extra"))
    assert status == 0 and re.search(r"^extra +cpu +4 ", out, re.MULTILINE), out


def test_each_backend_row_is_printed_as_soon_as_the_backend_is_done(monkeypatch, capsys):
    """scripts/gpu_check.sh cuts the check short at its cap: the rows of the backends done by then stay in its
    log. The second backend is interrupted on its first call, after the first one's row was printed."""
    def interrupt(out):
        raise KeyboardInterrupt

    with backends.registered_for_tests(_fake_backend(name="cut", wrong=interrupt)), pytest.raises(KeyboardInterrupt):
        _run_check(monkeypatch, capsys, argv=("--no-timing", "--backends", "cpu", "cut"))
    out = capsys.readouterr().out
    assert re.search(r"^backend +on +cases ", out, re.MULTILINE), f"expected the table's header in:\n{out}"
    assert re.search(r"^cpu +cpu +4 +\S+ +\S+ +ok ", out, re.MULTILINE), f"expected the cpu backend's row in:\n{out}"
    assert not re.search(r"^cut ", out, re.MULTILINE), f"expected no row for the interrupted backend in:\n{out}"
