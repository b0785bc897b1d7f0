"""The pre-registered endpoints of toy-length-dense and of the format ablation (benchmarks/late_phase.py,
benchmarks/LEARNING.md) on small synthetic runs: censoring, undetermined pairs, ties, the sign test, Holm,
the non-inferiority margin and the verdict labels."""
import sys

import pytest

from tests.benchmark_scripts import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))
import late_phase as lp  # noqa: E402
from late_phase import Observed  # noqa: E402

STEPS = 200


def length_curve(c09, c099, steps=STEPS):
    """Training length compliance whose first stable crossings of 0.9 and 0.99 are c09 and c099 (None: never):
    0 until c09 - 10, 0.96 until c099 - 8, then 1 (the 10-step mean reaches 0.99 with two 0.96 left in it)."""
    if c09 is None:
        return [0.5] * steps
    low = c09 - 10
    high = steps if c099 is None else c099 - 8
    return [0.0] * low + [0.96] * (high - low) + [1.0] * (steps - high)


def run(method, seed, c09, c099, acc=0.78, joint=0.77, steps=STEPS):
    records = [{"step": i + 1, "reward/length/mean": v} for i, v in enumerate(length_curve(c09, c099, steps))]
    records[-1].update({"eval_sampled/correct": acc, "eval_sampled/length": 0.99, "eval_sampled/joint": joint,
                        "eval_sampled/prompts": 200, "eval_sampled/replies": 3200})
    return {"method": method, "seed": seed, "steps": steps, "records": records}


def test_the_synthetic_curves_cross_where_they_say():
    crossings = lp.crossing_observations(run("gdpo", 0, 100, 140))
    assert crossings[0.9] == Observed(100) and crossings[0.99] == Observed(140)
    never = lp.crossing_observations(run("gdpo", 0, 100, None))
    assert never[0.9] == Observed(100) and never[0.99] == Observed(181, censored=True)


def test_a_late_phase_whose_upper_end_never_confirms_is_censored_after_the_last_confirmable_step():
    assert lp.last_confirmable(200) == 180          # steps - HOLD
    crossings = lp.crossing_observations(run("gdpo", 0, 100, None))
    assert lp.late_phase(crossings[0.9], crossings[0.99]) == Observed(81, censored=True)   # >= 181 - 100
    assert lp.late_phase(Observed(100), Observed(140)) == Observed(40)
    # A 60-step run: last confirmable step 40, so L >= 41 - c(0.9).
    short = lp.crossing_observations(run("gdpo", 0, 20, None, steps=60))
    assert lp.late_phase(short[0.9], short[0.99]) == Observed(21, censored=True)


def test_a_run_that_never_confirms_the_lower_end_has_no_late_phase(capsys):
    crossings = lp.crossing_observations(run("dara", 3, None, None))
    assert crossings[0.9].censored and lp.late_phase(crossings[0.9], crossings[0.99]) is None
    assert lp.pair_sign(None, Observed(40)) is None and lp.pair_sign(Observed(40), None) is None
    lp.print_per_seed({"dara": {3: crossings}, "gdpo": {3: lp.crossing_observations(run("gdpo", 3, 100, 140))}})
    out = capsys.readouterr().out
    assert "never confirm 0.9 (no late phase): dara seed 3" in out and ">=181 / >=181 / -" in out


def test_pair_signs_under_censoring():
    censored = Observed(40, censored=True)
    assert lp.pair_sign(censored, Observed(39)) == 1           # at least 40 is longer than 39
    assert lp.pair_sign(censored, Observed(40)) is None        # at least 40 may equal 40
    assert lp.pair_sign(censored, Observed(55)) is None
    assert lp.pair_sign(Observed(39), censored) == -1
    assert lp.pair_sign(Observed(40), censored) is None
    assert lp.pair_sign(censored, Observed(30, censored=True)) is None   # both censored: undetermined
    assert lp.pair_sign(censored, censored) is None
    assert lp.pair_sign(Observed(38), Observed(42)) == -1 and lp.pair_sign(Observed(42), Observed(38)) == 1
    assert lp.pair_sign(Observed(40), Observed(40)) == 0       # a tie


def test_the_sign_test_p_values_the_draft_quotes():
    assert lp.sign_test_p(9, 1) == pytest.approx(22 / 1024) == pytest.approx(0.0215, abs=5e-5)
    assert lp.sign_test_p(1, 9) == lp.sign_test_p(9, 1)
    assert lp.sign_test_p(10, 0) == pytest.approx(0.00195, abs=5e-6)
    assert lp.sign_test_p(8, 2) == pytest.approx(0.109, abs=5e-4)


def table_of(late: dict) -> dict:
    """method -> seed -> crossings with c(0.9) = 100 and the given late phase (None: 0.99 never confirmed)."""
    return {m: {s: {0.9: Observed(100), 0.99: Observed(181, True) if L is None else Observed(100 + L)}
                for s, L in enumerate(values)} for m, values in late.items()}


def test_sign_cell_counts_ties_censoring_and_the_observed_mean():
    #        seed:   0   1   2   3     4     5
    table = table_of({"dara": [30, 40, 50, None, 90, None],
                      "gdpo": [40, 40, 40, 50, None, None]})
    cell = lp.sign_cell(table, "dara", "gdpo", lp.late_measure(0.9, 0.99))
    assert cell["signs"] == {0: -1, 1: 0, 2: 1, 3: 1, 4: None, 5: None}
    # seed 3: >= 81 against 50: longer; seed 4: 90 against >= 81: undetermined; seed 5: both censored
    assert (cell["lower"], cell["higher"], cell["ties"], cell["undetermined"], cell["censored"]) == (1, 2, 1, 2, 3)
    assert cell["p"] == lp.sign_test_p(1, 2)
    assert cell["observed_differences"] == [-10, 0, 10] and cell["mean"] == 0.0 and cell["mean_p"] == 1.0


def test_holm_goes_with_its_cell():
    table = table_of({"gdpo": [40] * 10, "dara": [30] * 9 + [50], "dara-sym": [30] * 10})
    family = lp.sign_family(table, lp.PRIMARY_FAMILY, lp.late_measure(0.9, 0.99))
    assert family[("dara", "gdpo")]["p"] == pytest.approx(22 / 1024)
    assert family[("dara-sym", "gdpo")]["p"] == pytest.approx(2 / 1024)
    assert family[("dara-sym", "gdpo")]["holm"] == pytest.approx(4 / 1024)      # the smaller p, times 2
    assert family[("dara", "gdpo")]["holm"] == pytest.approx(22 / 1024)         # the larger, times 1
    assert [lp.late_phase_verdict(c) for c in family.values()] == ["held", "held"]


def cell(lower, higher, holm):
    return {"lower": lower, "higher": higher, "holm": holm}


def test_verdict_labels():
    assert lp.late_phase_verdict(cell(9, 1, 0.0215)) == "held"
    assert lp.late_phase_verdict(cell(1, 9, 0.0215)) == "reversed"
    assert lp.late_phase_verdict(cell(9, 1, 0.05)) == "not shown"                # Holm p must be below alpha
    assert lp.late_phase_verdict(cell(8, 2, 0.109)) == "not shown"
    assert lp.crossing_verdict(cell(10, 0, 0.02)) == "sooner" and lp.crossing_verdict(cell(0, 10, 0.02)) == "later"
    assert lp.two_sided_verdict({"holm": 0.01, "mean": 0.02}) == "higher"
    assert lp.two_sided_verdict({"holm": 0.01, "mean": -0.02}) == "lower"
    assert lp.two_sided_verdict({"holm": 0.2, "mean": -0.02}) == "not shown"


def test_noninferiority_verdicts():
    assert lp.noninferiority_verdict({"holm": 0.01, "low": -0.03, "high": 0.03}) == "non-inferior"
    assert lp.noninferiority_verdict({"holm": 0.2, "low": -0.01, "high": 0.01}) == "not shown non-inferior"
    assert lp.noninferiority_verdict({"holm": 0.2, "low": -0.05, "high": 0.0}).startswith("undecided")
    assert lp.noninferiority_verdict({"holm": 0.2, "low": -0.04, "high": 0.0}) == "not shown non-inferior"


def arms(late, acc=None, joint=None, c09=100):
    """Runs of each arm over seeds: late[arm][seed] its late phase (None: 0.99 never confirmed), Acc and Joint."""
    acc, joint = acc or {}, joint or {}
    return {m: [run(m, s, c09, None if L is None else c09 + L, acc.get(m, [0.78] * len(v))[s],
                    joint.get(m, [0.77] * len(v))[s]) for s, L in enumerate(v)] for m, v in late.items()}


def test_length_dense_tables_and_verdicts(capsys):
    seeds = range(10)
    by_method = arms(
        {"gdpo": [40] * 10, "dara": [30] * 9 + [50], "dara-sym": [None] * 10,
         "static-asym": [40] * 10, "static-sym": [40] * 10},
        acc={"gdpo": [0.78] * 10, "dara": [0.77 + 0.001 * s for s in seeds],        # 0.01 lower +- a little
             "dara-sym": [0.75 + 0.001 * s for s in seeds]},                         # 0.03 lower: not within 0.02
        joint={"static-asym": [0.70] * 10})
    results = lp.print_length_dense_tables(by_method)
    out = capsys.readouterr().out
    assert results["P"][("dara", "gdpo")]["p"] == pytest.approx(22 / 1024)
    assert results["P"][("dara-sym", "gdpo")]["higher"] == 10                    # >= 81 against 40
    assert "- P, late phase, dara vs gdpo: held" in out and "- P, late phase, dara-sym vs gdpo: reversed" in out
    assert results["S2"][("dara", "gdpo")]["p"] == pytest.approx(1 / 1024)       # one-sided, all above -0.02
    assert results["S2"][("dara-sym", "gdpo")]["p"] == 1.0
    assert "- S2, dara vs gdpo: non-inferior" in out and "- S2, dara-sym vs gdpo: not shown non-inferior" in out
    assert len(results["S3"]) == 4 and results["S3"][("dara", "static-asym")]["mean"] == pytest.approx(0.07)
    assert "- S3, dara vs static-asym: higher" in out
    assert len(results["S1"]) == 10 and results["S1"][("dara-sym", "gdpo", 0.99)]["higher"] == 10
    assert results["S1 toy-budget form"][("dara-sym", "gdpo", 0.99)]["differences"] == [201 - 140] * 10
    assert "- S4, late phase, dara vs static-asym: held" in out
    assert {label for label, _, _ in results["sensitivity"]} == {
        "L 0.8 -> 0.99", "L 0.9 -> 0.95", "L 0.95 -> 0.99", "L 0.9 -> 0.99, WINDOW/HOLD 5/10",
        "L 0.9 -> 0.99, WINDOW/HOLD 20/20"}
    assert "last confirmable step 180" in out


def test_sensitivity_rules_censor_at_their_own_last_step():
    by_method = arms({"gdpo": [40], "dara": [None]})
    cells = lp.sensitivity(by_method, [("dara", "gdpo")])
    values = cells[("L 0.9 -> 0.99, WINDOW/HOLD 5/10", "dara", "gdpo")]["values"][0]
    assert lp.crossing_observations(by_method["dara"][0], 5, 10)[0.9] == Observed(95)   # 0.96 from step 91 on
    assert values[0] == Observed(191 - 95, censored=True)                 # HOLD 10: last confirmable step 190


def test_ablation_family_a(capsys):
    by_method = arms({"gdpo": [3] * 10, "dara": [3] * 4 + [5] * 6}, c09=24)
    for runs in by_method.values():
        for r in runs:
            r["steps"] = 100
            r["records"] = r["records"][:100]
            r["records"][-1].update({"eval_sampled/correct": 0.8, "eval_sampled/length": 0.99,
                                     "eval_sampled/joint": 0.79, "eval_sampled/prompts": 200,
                                     "eval_sampled/replies": 3200})
    results = lp.print_ablation_tables(by_method, None)
    out = capsys.readouterr().out
    family = results["without format"]["A"]
    assert set(family) == {("dara", "gdpo", "L"), ("dara", "gdpo", "c(0.99)")}
    late = family[("dara", "gdpo", "L")]
    assert (late["lower"], late["higher"], late["ties"]) == (0, 6, 4) and late["p"] == pytest.approx(2 / 64)
    assert late["holm"] == pytest.approx(4 / 64)                         # Holm over the 2: not shown
    assert "- dara vs gdpo, L: not shown" in out and "does not exist; not shown" in out
    assert lp.is_format_ablation("toy-budget", [{"rewards": ["correct", "length"]}])
    assert not lp.is_format_ablation("toy-budget", [{"rewards": ["correct", "format", "length"]}])


def test_the_command_says_when_there_are_no_results_yet_and_picks_the_endpoints_by_preset(tmp_path, capsys):
    from tests.benchmark_scripts import load_benchmark

    script = load_benchmark("learning_speed")
    with pytest.raises(SystemExit, match="learning-toy-length-dense.json does not exist: pass --run"):
        script.main(["--preset", "toy-length-dense", "--json", str(tmp_path / "learning-toy-length-dense.json")])
    by_method = arms({"gdpo": [40] * 2, "dara": [30] * 2})
    for r in (r for runs in by_method.values() for r in runs):
        r["rewards"] = ["correct", "length"]
    assert "P" in script.print_endpoints("toy-length-dense", by_method)
    assert "without format" in script.print_endpoints("toy-budget", by_method)
    capsys.readouterr()
