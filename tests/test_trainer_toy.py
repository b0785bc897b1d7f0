"""The embedded default end to end: metrics, learning signal, resume, plot."""
import math

import pytest
import torch

pytest.importorskip("transformers")
from dara_train.metrics import read_metrics  # noqa: E402
from tests.trainer_helpers import run_train  # noqa: E402

REQUIRED = ["step", "response_length/mean", "adv/batch_std", "time/rollout", "time/reward",
            "time/advantage", "time/update"]
REWARDS = ["correct", "format", "length"]


def test_toy_run_metrics_and_learning(tmp_path):
    out = tmp_path / "toy"
    result = run_train("--preset", "toy", "--steps", "40", "--output-dir", str(out), "--set", "eval_every=20")
    assert "held-out eval" in result.stdout and "steps until" in result.stdout
    # The default run warns about nothing (transformers' ['top_k'] on every greedy evaluation was one), and its
    # progress, written to a pipe, is plain lines rather than one line of carriage returns.
    assert not [line for line in result.stderr.splitlines() if "warn" in line.lower()], result.stderr
    assert "\r" not in result.stderr and "100% step 40/40" in result.stderr
    assert (out / "curves.png").stat().st_size > 1000
    records = read_metrics(out)
    steps = [r for r in records if "time/update" in r]
    assert [r["step"] for r in steps] == list(range(1, 41))
    for r in steps:
        for key in REQUIRED:
            assert key in r, key
        for name in REWARDS:
            for key in (f"reward/{name}/mean", f"density/{name}", f"weight/{name}", f"applied_weight/{name}",
                        f"energy/{name}", f"weighted_energy/{name}"):
                assert key in r, key
            assert 0.0 <= r[f"density/{name}"] <= 1.0
            assert math.isfinite(r[f"weight/{name}"])
            # Nothing is applied to a reward active in no group, whatever weight the op reports for it.
            assert r[f"applied_weight/{name}"] == (r[f"weight/{name}"] if r[f"density/{name}"] > 0 else None)
            assert (r[f"weighted_energy/{name}"] > 0) == (r[f"density/{name}"] > 0)
    assert any(r[f"applied_weight/{name}"] is None for r in steps for name in REWARDS), "no inactive step to check"
    evals = [r for r in records if "eval/format" in r]
    assert [r["step"] for r in evals] == [0, 20, 40]
    start = sum(r["reward/format/mean"] for r in steps[:5]) / 5
    end = sum(r["reward/format/mean"] for r in steps[-5:]) / 5
    assert start < 0.1, f"format should start sparse, got {start:.3f}"
    assert end > start + 0.2, f"format reward did not rise: {start:.3f} -> {end:.3f}"

    png = tmp_path / "curves.png"
    from dara_train.plot import plot_run

    assert plot_run(out, png).stat().st_size > 1000


def final_weights(out):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path = sorted((out / "checkpoints").glob("step_*"))[-1]
    dcp_to_torch_save(str(path), str(out / "final.pt"))
    return torch.load(out / "final.pt", weights_only=False)["model"]


def test_resume_equals_uninterrupted(tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["--preset", "toy", "--set", "eval_every=0", "--set", "save_every=3"]
    run_train(*common, "--steps", "6", "--output-dir", str(straight))
    run_train(*common, "--steps", "3", "--output-dir", str(split))
    run_train(*common, "--steps", "6", "--output-dir", str(split), "--resume")
    a = [r for r in read_metrics(straight) if r["step"] > 3]
    b = [r for r in read_metrics(split) if r["step"] > 3]
    assert len(a) == len(b) == 3
    for x, y in zip(a, b):
        for key in x:
            if key.startswith(("reward/", "density/", "weight/", "train/loss")):
                assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-9), key
    wa, wb = final_weights(straight), final_weights(split)
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=1e-6, atol=1e-7)


def test_unknown_override_is_rejected(tmp_path):
    with pytest.raises(AssertionError, match="unknown config key"):
        run_train("--preset", "toy", "--steps", "1", "--output-dir", str(tmp_path), "--set", "optim.lrr=1")


def test_sampled_evaluation_changes_no_training_step(tmp_path):
    """Sampling the held-out replies at every step draws on the evaluation's own seeds: the training records
    equal those of a run that never evaluates."""
    common = ["--preset", "toy", "--steps", "2"]
    run_train(*common, "--output-dir", str(tmp_path / "plain"), "--set", "eval_every=0")
    run_train(*common, "--output-dir", str(tmp_path / "evaluated"), "--set", "eval_every=1")
    plain, evaluated = read_metrics(tmp_path / "plain"), read_metrics(tmp_path / "evaluated")
    trained = [{k: v for k, v in r.items() if not k.startswith(("time/", "eval"))} for r in evaluated if r["step"]]
    assert trained == [{k: v for k, v in r.items() if not k.startswith("time/")} for r in plain]
    for record in evaluated:
        assert (record["eval/prompts"], record["eval/replies"]) == (20, 20)
        assert (record["eval_sampled/prompts"], record["eval_sampled/replies"]) == (20, 320)
        assert record["eval_sampled/joint"] <= min(record[f"eval_sampled/{name}"] for name in REWARDS)
