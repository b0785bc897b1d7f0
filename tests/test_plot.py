"""dara-train plot from small synthetic metrics: the applied weight has a gap where a reward was inactive,
the energy shares split each step, the progress display, and several runs as median and quartiles."""
import json
import math

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("yaml")
from dara_train.cli import main  # noqa: E402
from dara_train.metrics import MetricsLog  # noqa: E402
from dara_train.plot import (  # noqa: E402
    find_runs,
    reward_names,
    run_figure,
    run_labels,
    runs_figure,
    training_records,
)

INACTIVE_STEP = 3   # `format` is active in no group at this step: the op reports its cap, 5, and applies nothing


def step_record(step: int, scale: float = 1.0, logged_applied: bool = True) -> dict:
    """Three rewards as the trainer logs them (DARA-Asym); `format` inactive at INACTIVE_STEP."""
    inactive = step == INACTIVE_STEP
    density = {"correct": 0.5, "format": 0.0 if inactive else 0.04, "length": 0.8}
    weight = {"correct": 1.26, "format": 5.0 if inactive else 4.47, "length": 1.0}
    energy = {"correct": 2.0 * scale, "format": 0.0 if inactive else 1.0 * scale, "length": 1.0 * scale}
    record = {"step": step}
    for name in density:
        record[f"reward/{name}/mean"] = 0.1 * step * scale
        record[f"density/{name}"] = density[name]
        record[f"weight/{name}"] = weight[name]
        record[f"weighted_energy/{name}"] = energy[name]
        if logged_applied:
            record[f"applied_weight/{name}"] = weight[name] if density[name] > 0 else None
    return record


def write_run(path, records, method="dara", seed=0):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [{"step": 0, "eval/format": 0.0},
                                                                                *records]))
    (path / "config.yaml").write_text(f"seed: {seed}\noutput_dir: {path}\nadvantage:\n  method: {method}\n"
                                      "  options: {}\n")


def panel(fig, title: str):
    return next(ax for ax in fig.axes if ax.get_title().startswith(title))


def ydata(ax, label: str):
    return next(line for line in ax.get_lines() if line.get_label() == label).get_ydata()


@pytest.mark.parametrize("logged_applied", [True, False], ids=["applied-weight-logged", "older-run"])
def test_applied_weight_has_a_gap_where_the_reward_was_inactive(tmp_path, logged_applied):
    records = [step_record(s, logged_applied=logged_applied) for s in range(1, 7)]
    write_run(tmp_path / "run", records)
    main(["plot", str(tmp_path / "run")])
    assert (tmp_path / "run" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    fig = run_figure(training_records(records, "synthetic"))
    weights = panel(fig, "applied weight")
    drawn = ydata(weights, "format")
    assert math.isnan(drawn[INACTIVE_STEP - 1])
    assert [w for i, w in enumerate(drawn) if i != INACTIVE_STEP - 1] == [4.47] * 5
    assert list(ydata(weights, "correct")) == [1.26] * 6


def test_energy_shares_split_each_step_and_are_smoothed(tmp_path):
    records = [step_record(s) for s in range(1, 7)]
    shares = panel(run_figure(records), "share of weighted advantage energy")
    raw = [line.get_ydata() for line in shares.get_lines() if line.get_label().startswith("_")]
    smooth = {name: ydata(shares, name) for name in reward_names(records)}
    assert [round(sum(step), 12) for step in zip(*raw)] == [1.0] * 6
    assert smooth["format"][INACTIVE_STEP - 1] == pytest.approx((0.25 + 0.25 + 0.0) / 3)
    assert smooth["correct"][INACTIVE_STEP - 1] == pytest.approx((0.5 + 0.5 + 2 / 3) / 3)


def test_several_runs_draw_the_median_and_interquartile_band(tmp_path):
    for seed, scale in enumerate([1.0, 2.0, 4.0, 3.0]):
        write_run(tmp_path / "runs" / f"dara-{seed}", [step_record(s, scale) for s in range(1, 4)], seed=seed)
    write_run(tmp_path / "runs" / "gdpo-0", [step_record(s) for s in range(1, 4)], method="gdpo")
    main(["plot", str(tmp_path / "runs")])
    assert (tmp_path / "runs" / "curves.png").stat().st_size > 1000

    runs = {"method=dara": [[step_record(s, scale) for s in range(1, 4)] for scale in (1.0, 2.0, 4.0, 3.0)]}
    fig = runs_figure(runs, "synthetic")
    mean = panel(fig, "correct: reward mean")
    assert list(ydata(mean, "method=dara (n=4)")) == pytest.approx([0.25, 0.5, 0.75])   # median scale 2.5
    band = mean.collections[0].get_paths()[0].vertices[:, 1]
    assert {round(v, 9) for v in band} == {round(0.1 * s * q, 9) for s in (1, 2, 3) for q in (1.75, 3.25)}
    assert math.isnan(ydata(panel(fig, "format: applied weight"), "method=dara (n=4)")[INACTIVE_STEP - 1])


def test_labels_name_what_differs_between_runs(tmp_path):
    write_run(tmp_path / "a", [step_record(1)], method="dara")
    write_run(tmp_path / "b", [step_record(1)], method="gdpo", seed=1)
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        main(["plot", str(tmp_path / "a"), str(tmp_path / "missing")])
    runs = find_runs([tmp_path / "a", tmp_path / "b"])
    assert runs == [tmp_path / "a", tmp_path / "b"] == find_runs([tmp_path])
    assert run_labels(runs) == ["method=dara", "method=gdpo"]


def test_progress_is_one_plain_line_every_five_percent_off_a_terminal(tmp_path, capsys):
    log = MetricsLog(tmp_path, total_steps=40, tensorboard=False, enabled=True)
    for step in range(1, 41):
        log.log({"step": step, "reward/format/mean": step / 40})
    lines = capsys.readouterr().err.splitlines()
    assert "\r" not in "".join(lines)
    assert [line.split()[2] for line in lines] == [f"{s}/40" for s in [1, *range(2, 41, 2)]]
    assert lines[-1].startswith("100% step 40/40 format=1.00")
