"""CI smoke of the learning-speed experiment: 2 seeds of DARA and Static-Asym
for a few steps with --run, then the same command again, which must resume
instead of rerun, and without --run, which must only read; a command without
--run that asks for runs the results file lacks must stop and name them; and
the named methods' overrides, as the trainer reads them. The experiment's
numbers are in benchmarks/LEARNING.md, not asserted here."""
import json
import subprocess
import sys

import pytest

from tests.benchmark_scripts import BENCHMARKS, load_benchmark

pytest.importorskip("transformers")
SCRIPT = BENCHMARKS / "learning_speed.py"


def load_script():
    return load_benchmark("learning_speed")


def test_sign_test_is_exact_and_two_sided():
    p = load_script().sign_test_p
    assert p(10, 0) == p(0, 10) == pytest.approx(2 / 1024)
    assert p(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert p(5, 5) == 1.0 and p(0, 0) == 1.0


def test_named_methods_reach_both_calibrations_and_group_sizes():
    from dara_train.config import load_config

    script = load_script()
    specs = script.method_specs(script.MAIN_METHODS, "1,5,1", [4, 16], preset_group=4, replies=512)
    options = {}
    for label, overrides in specs.items():
        cfg = load_config("toy-paper", None, overrides)
        options[label] = (cfg.advantage.method, cfg.advantage.options, cfg.rollout.group_size,
                          cfg.rollout.prompts_per_step)
    assert options["dara"] == ("dara", {}, 4, 128)
    assert options["dara-sym"] == ("dara", {"calibration": "symmetric"}, 4, 128)
    assert options["static-asym"] == ("static", {"calibration": "positive", "reward_weights": [1, 5, 1]}, 4, 128)
    assert options["static-sym"] == ("static", {"reward_weights": [1, 5, 1]}, 4, 128)
    assert options["gdpo@G16"] == ("gdpo", {}, 16, 32)
    assert options["dara-sym@G16"] == ("dara", {"calibration": "symmetric"}, 16, 32)
    assert len(specs) == 2 * len(script.MAIN_METHODS)
    pairs = script.pairs(list(specs))
    assert ("dara", "gdpo") in pairs and ("dara@G16", "gdpo@G16") in pairs and ("dara", "gdpo@G16") not in pairs
    assert ("dara-sym", "static-sym") in pairs and ("dara-sym", "static-asym") not in pairs
    with pytest.raises(SystemExit, match="groups of 3"):
        script.method_specs(["dara"], "1,5,1", [3], preset_group=4, replies=512)


def test_group_signal_arms_reach_the_trainer():
    from dara_train.config import load_config

    script = load_script()
    specs = script.method_specs(script.SIGNAL_ARMS, "1,5,1", [], preset_group=4, replies=512)
    seen = {}
    for label, overrides in specs.items():
        cfg = load_config("toy-paper", None, overrides)
        seen[label] = (cfg.advantage.method, cfg.advantage.options, cfg.rollout.dynamic_sampling,
                       cfg.rollout.candidate_groups, cfg.rollout.prompts_per_step)
    assert seen == {"gdpo-ds": ("gdpo", {}, "any", 192, 128), "dara-ds": ("dara", {}, "any", 192, 128),
                    "dara-zero": ("dara", {"no_signal": "zero"}, "off", 0, 128)}


def synthetic_run(method, seed, formats):
    return {"method": method, "seed": seed, "rewards": ["format"], "thresholds": {"format": 0.8},
            "steps": len(formats), "start": 0,
            "records": [{"step": i + 1, "reward/format/mean": v} for i, v in enumerate(formats)]}


def test_drops_and_the_paired_area_endpoint():
    script = load_script()
    assert script.drop_step(synthetic_run("a", 0, [0.5, 0.9, 0.3, 0.9])) == 3
    assert script.drop_step(synthetic_run("a", 0, [0.9, 0.5, 0.0, 0.9])) is None    # falls 0.4, then 0.5
    assert script.drop_step(synthetic_run("a", 0, [0.7, 0.1, 0.9, 0.9])) is None    # before reaching 0.8
    assert script.area(synthetic_run("a", 0, [0.5, 0.9, 0.3, 0.9]), 2) == pytest.approx(0.7)
    mine = [synthetic_run("a", 0, [0.4, 0.8]), synthetic_run("a", 1, [0.5, 1.0])]
    other = [synthetic_run("b", 0, [0.2, 0.4]), synthetic_run("b", 1, [0.5, 1.0])]
    result = script.paired_ratio(mine, other, lambda run: script.area(run, 2))
    assert result["ratios"] == pytest.approx([2.0, 1.0]) and result["above"] == 1 and result["p"] == 1.0
    assert result["ratio"] == pytest.approx(2 ** 0.5)
    assert result["low"] == pytest.approx(1.0) and result["high"] == pytest.approx(2.0)
    with pytest.raises(SystemExit, match="has 2 of steps 1-3"):
        script.area(mine[0], 3)


def test_costs_per_response_generated():
    script = load_script()
    run = synthetic_run("a", 0, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0])
    for record, responses in zip(run["records"], [10, 20, 30, 40, 50, 60, 70]):
        record["sampling/responses"] = responses
    assert script.response_area(run, 60, default=5) == pytest.approx((20 * 0.5 + 30 * 1.0) / 60)
    assert script.response_area(synthetic_run("b", 0, [0.0, 1.0]), 8, default=5) == pytest.approx(3 / 8)
    assert script.responses_to_threshold(run, default=5) == 10 + 20 + 30 + 40 + 50 + 60   # 5-step mean 0.8 at 6
    assert script.responses_to_threshold(synthetic_run("b", 0, [0.0] * 5), default=5) is None
    with pytest.raises(SystemExit, match="generated 280 of 300 responses"):
        script.response_area(run, 300, default=5)


def test_paired_statistics():
    sys.path.insert(0, str(SCRIPT.parent))
    from paired_tests import holm, mean_difference, permutation_p, t_quantile

    assert permutation_p([1.0] * 10) == pytest.approx(2 / 1024)
    assert permutation_p([3.0, 1.0, 1.0]) == pytest.approx(2 / 8)       # only the all-flipped signs tie
    assert permutation_p([3.0, -1.0, 1.0]) == pytest.approx(6 / 8)      # |sum| >= 3: 5, 3, 3 and their negatives
    assert permutation_p([0.0, 0.0]) == 1.0
    assert permutation_p([3.0, -1.0, 1.0], greater=True) == pytest.approx(3 / 8)   # sums 5, 3, 3 of 8
    assert permutation_p([-3.0, -1.0, -1.0], greater=True) == 1.0
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert t_quantile(0.95, 9) == pytest.approx(2.2622, abs=1e-4)
    ci = mean_difference([0.1, 0.2, 0.0, 0.1])
    assert ci["mean"] == pytest.approx(0.1) and ci["high"] - ci["mean"] == pytest.approx(3.1824 * 0.0816 / 2, abs=1e-3)


def test_without_run_a_missing_or_different_run_is_an_error_and_nothing_is_written(tmp_path):
    script = load_script()
    results = tmp_path / "runs.json"
    ask = ["--preset", "toy", "--seeds", "2", "--methods", "dara,static-asym", "--steps", "10", "--json", str(results)]
    with pytest.raises(SystemExit, match="does not exist: pass --run"):
        script.main(ask)
    assert not results.exists()

    specs = script.method_specs(["dara", "static-asym"], "1,5,1", [], preset_group=8, replies=128)
    made = [{"method": "dara", "seed": 0, "overrides": specs["dara"]},
            {"method": "static-asym", "seed": 0, "overrides": script.advantage_overrides("static-asym", "1,4,1", 16)}]
    results.write_text(json.dumps({"preset": "toy", "steps_override": 10, "settings": [], "runs": made}))
    before = results.read_bytes()
    with pytest.raises(SystemExit) as stop:
        script.main(ask)
    assert str(stop.value) == (f"{results} lacks runs this command asks for (not in it: dara seed 1; static-asym "
                               "seed 1; made with other overrides for their method: static-asym seed 0): pass --run "
                               f"to train them (it rewrites {results})")
    with pytest.raises(SystemExit, match=r"another experiment \(--steps 10 there, 20 asked\): pass --run"):
        script.main([*ask, "--steps", "20"])
    assert results.read_bytes() == before


def test_smoke_run_two_seeds_few_steps_then_resume_then_read(tmp_path):
    results, png = tmp_path / "runs.json", tmp_path / "curves.png"
    command = [sys.executable, str(SCRIPT), "--preset", "toy", "--seeds", "2", "--other-seeds", "2",
               "--methods", "dara,static-asym", "--steps", "10", "--jobs", "2", "--json", str(results),
               "--plot", str(png), "--run"]
    # Outside the checkout, so the installed packages are imported (as in tests/trainer_helpers.py).
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = json.loads(results.read_text())["runs"]
    assert sorted((r["method"], r["seed"]) for r in runs) == [("dara", 0), ("dara", 1), ("static-asym", 0),
                                                              ("static-asym", 1)]
    for run in runs:
        assert len(run["commit"].split("+")[0]) == 40
        steps = [r["step"] for r in run["records"] if "reward/format/mean" in r]
        assert steps == list(range(1, 11))
        assert {"density/format", "weight/format", "weighted_energy/format", "eval/correct"} <= set().union(
            *run["records"])
        if run["method"] == "static-asym":   # the options reached the op: its fixed weights are logged
            assert {r["weight/format"] for r in run["records"] if "weight/format" in r} == {5.0}
    for row in ("| dara | 2 |", "| static-asym | 2 |", "| dara vs static-asym | "):
        assert row in first.stdout, first.stdout
    assert "sign-test p" in first.stdout and png.stat().st_size > 1000

    again = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "all 4 runs are already in" in again.stderr
    assert again.stdout.split("runs:")[0] == first.stdout.split("runs:")[0]

    written = results.read_bytes()
    read = subprocess.run(command[:-3], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert read.returncode == 0, read.stderr[-3000:]
    assert read.stdout == again.stdout.split("curves:")[0] and results.read_bytes() == written


def test_sustained_crossing_as_the_authors_compute_it():
    sys.path.insert(0, str(SCRIPT.parent))
    from budget_endpoints import sustained_crossing

    rising = [0.0] * 5 + [1.0] * 40
    assert sustained_crossing(rising, 0.5) == 10        # the 10-step mean of steps 1-10 is 0.5
    assert sustained_crossing(rising, 1.0) == 15
    assert sustained_crossing(rising[:34], 1.0) is None   # step 15 + 20 was not reached
    assert sustained_crossing(rising[:35], 1.0) == 15
    dipping = [1.0] * 12 + [0.0] + [1.0] * 40            # the dip holds the mean below 0.95 for steps 13-22
    assert sustained_crossing(dipping, 0.95) == 23


def budget_run(method, seed, length, acc, joint):
    records = [{"step": 0, "eval_sampled/correct": 0.5, "eval_sampled/length": 0.0, "eval_sampled/joint": 0.0,
                "eval_sampled/prompts": 200, "eval_sampled/replies": 3200}]
    records += [{"step": i + 1, "reward/length/mean": v} for i, v in enumerate(length)]
    records[-1].update({"eval_sampled/correct": acc, "eval_sampled/length": 0.99, "eval_sampled/joint": joint,
                        "eval_sampled/prompts": 200, "eval_sampled/replies": 3200})
    return {"method": method, "seed": seed, "steps": len(length), "records": records}


def test_budget_endpoints_and_their_verdicts(capsys):
    sys.path.insert(0, str(SCRIPT.parent))
    import budget_endpoints as be

    def ramp(start):   # compliance 0 until `start`, then 1
        return [0.0] * start + [1.0] * (60 - start)

    seeds = range(6)
    by_method = {
        "gdpo": [budget_run("gdpo", s, ramp(20 + s), 0.80 + 0.001 * s, 0.70) for s in seeds],
        "dara": [budget_run("dara", s, ramp(10 + s), 0.81 + 0.001 * s, 0.75 + 0.01 * s) for s in seeds],
        "dara-sym": [budget_run("dara-sym", s, ramp(20 + s), 0.70, 0.70) for s in seeds],
        "static-asym": [budget_run("static-asym", s, ramp(5), 0.8, 0.70) for s in seeds],
        "static-sym": [budget_run("static-sym", s, ramp(5), 0.8, 0.70) for s in seeds],
    }
    results = be.print_budget_tables(by_method, never=61)
    printed = capsys.readouterr().out
    cell = results["crossing"][("dara", "gdpo", 0.99)]
    assert cell["differences"] == [-10] * 6 and cell["p"] == pytest.approx(2 / 64)
    assert cell["holm"] == pytest.approx(min(1.0, 10 * 2 / 64))    # 5 ties of dara-sym at p = 1 below it
    assert results["crossing"][("dara-sym", "gdpo", 0.5)]["p"] == 1.0
    assert results["accuracy"][("dara", "gdpo")]["p"] == pytest.approx(1 / 64)       # one-sided, all above -0.02
    assert results["accuracy"][("dara-sym", "gdpo")]["p"] == 1.0
    assert results["joint"][("dara", "static-asym")]["mean"] == pytest.approx(0.075)
    assert "length headline, dara vs gdpo at >= 0.99: partly: sooner" not in printed     # Holm 0.31: not shown
    assert "length headline, dara vs gdpo at >= 0.99: failed (crossing not shown sooner" in printed
    assert "Table 4 Joint, dara vs static-asym: not shown" in printed and "| >= 0.99 |" in printed


def test_other_thresholds_change_the_tables_not_the_file(tmp_path, capsys):
    script = load_script()
    overrides = script.method_specs(["dara"], "1,5,1", [], preset_group=8, replies=128)["dara"]
    formats = [0.0, 0.2, 0.5, 0.8, 0.85, 0.9, 0.95, 1.0, 1.0, 1.0]
    records = [{"step": 0, "eval/correct": 0.1, "eval/format": 0.0, "eval/length": 0.0}]
    records += [{"step": i + 1, **{f"reward/{n}/mean": v for n in ("correct", "format", "length")},
                 **{f"density/{n}": 0.5 for n in ("correct", "format", "length")}} for i, v in enumerate(formats)]
    run = {"method": "dara", "seed": 0, "overrides": overrides, "steps": 10, "start": 0,
           "rewards": ["correct", "format", "length"], "thresholds": {"correct": 0.4, "format": 0.8, "length": 0.8},
           "records": records}
    results = tmp_path / "runs.json"
    results.write_text(json.dumps({"preset": "toy", "steps_override": 10, "settings": [], "runs": [run]}))
    before = results.read_bytes()
    ask = ["--preset", "toy", "--seeds", "1", "--methods", "dara", "--steps", "10", "--json", str(results)]
    script.main(ask)
    own = capsys.readouterr().out
    script.main([*ask, "--thresholds", "format=0.95"])
    other = capsys.readouterr().out
    assert "format >= 0.8" in own and "| 7.0 [7-7] (1/1) |" in own       # 5-step mean of steps 3-7 is 0.8
    assert "format >= 0.95" in other and "| 10.0 [10-10] (1/1) |" in other  # of steps 6-10: 0.97
    assert results.read_bytes() == before


def test_toy_length_dense_arms_keep_the_presets_sampling_and_put_weight_5_on_length():
    """toy-length-dense runs toy-budget's five arms, each on --seeds, the static ones with 5 on length (its second
    reward), and every arm with the preset's dynamic sampling on the summed reward."""
    import argparse

    from dara_train.config import load_config

    script = load_script()
    preset = "toy-length-dense"
    weights = script.DEFAULT_STATIC_WEIGHTS[preset]
    assert weights == "1,5"
    specs = script.method_specs(script.BUDGET_METHODS, weights, [], preset_group=16, replies=512)
    seen = {}
    for label, overrides in specs.items():
        cfg = load_config(preset, None, overrides)
        seen[label] = (cfg.advantage.method, cfg.advantage.options, cfg.rollout.dynamic_sampling,
                       cfg.rollout.candidate_groups, cfg.rollout.prompts_per_step, cfg.rollout.group_size)
    sampling = ("sum", 48, 32, 16)
    assert seen == {"gdpo": ("gdpo", {}, *sampling), "dara": ("dara", {}, *sampling),
                    "dara-sym": ("dara", {"calibration": "symmetric"}, *sampling),
                    "static-asym": ("static", {"calibration": "positive", "reward_weights": [1, 5]}, *sampling),
                    "static-sym": ("static", {"reward_weights": [1, 5]}, *sampling)}
    args = argparse.Namespace(preset=preset, seeds=10, other_seeds=5, first_seed=0)
    assert all(script.seed_count(args, label) == 10 for label in specs)
    assert preset in script.BUDGET_PRESETS
