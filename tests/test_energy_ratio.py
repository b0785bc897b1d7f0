"""benchmarks/energy_ratio.py on a tiny synthetic results dict: the energy estimate w^2 pi, the ratio to
correctness per step with its quartiles over seeds, a correctness active nowhere (no ratio, counted), a reward
active nowhere (ratio 0), the cap read from each arm's overrides and where it binds (within rounding, only
while the reward is active), and the files written next to the results. The measured ratios of the committed
runs are in benchmarks/LEARNING.md, not asserted here."""
import json

import pytest

from tests.benchmark_scripts import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "energy_ratio.py"


def load_script():
    return load_benchmark("energy_ratio")


def step(number, **rewards):
    """rewards: name -> (density, weight)."""
    record = {"step": number}
    for name, (density, weight) in rewards.items():
        record.update({f"density/{name}": density, f"weight/{name}": weight})
    return record


def run(method, seed, overrides, records):
    return {"method": method, "seed": seed, "overrides": overrides, "rewards": ["correct", "format", "length"],
            "steps": len(records), "start": 0, "records": [{"step": 0, "eval/correct": 0.5}, *records]}


def synthetic():
    gdpo = ["advantage.method=gdpo"]
    dara = ["advantage.method=dara"]
    static = ["advantage.method=static", "advantage.options={calibration: positive, reward_weights: [1,1,5]}"]
    return {"preset": "toy-budget", "settings": [], "runs": [
        run("gdpo", 0, gdpo, [step(1, correct=(0.5, 1), format=(0.25, 1), length=(0.1, 1)),
                              step(2, correct=(0.0, 1), format=(0.5, 1), length=(0.5, 1))]),
        run("gdpo", 1, gdpo, [step(1, correct=(0.4, 1), format=(0.4, 1), length=(0.2, 1)),
                              step(2, correct=(0.5, 1), format=(0.5, 1), length=(0.0, 1))]),
        run("gdpo", 2, gdpo, [step(1, correct=(0.8, 1), format=(0.2, 1), length=(0.8, 1)),
                              step(2, correct=(0.25, 1), format=(0.125, 1), length=(0.5, 1))]),
        run("dara", 0, dara, [step(1, correct=(0.5, 1), format=(0.5, 1), length=(0.125, 2)),
                              step(2, correct=(0.5, 1), format=(0.5, 1), length=(0.0125, 4.99996)),
                              step(3, correct=(0.5, 1), format=(0.5, 1), length=(0.02, 5))]),
        run("dara", 1, dara, [step(1, correct=(0.2, 2), format=(0.8, 1), length=(0.04, 5)),
                              step(2, correct=(0.5, 1), format=(0.5, 4.99), length=(0.0, 5)),
                              step(3, correct=(0.5, 1), format=(0.5, 1), length=(0.25, 1.4142))]),
        run("static-asym", 0, static, [step(1, correct=(0.5, 1), format=(0.5, 1), length=(0.1, 5))]),
    ]}


def test_energy_ratios_their_quartiles_and_where_the_cap_binds():
    script = load_script()
    result = script.analyse(synthetic())
    assert result["rewards"] == ["length", "format"]
    gdpo, dara, static = (result["arms"][m] for m in ("gdpo", "dara", "static-asym"))
    assert [a["name"] for a in (gdpo, dara, static)] == ["GDPO", "DARA-Asym", "Static-Asym"]

    # GDPO: the ratio is pi_k / pi_correct. Step 1: length 0.2, 0.5, 1.0 over the seeds (numpy's percentiles);
    # step 2: seed 0 has no correctness signal (left out), seed 1 no length signal (0), seed 2 2.0.
    q = gdpo["ratios"]["length"]["quartiles"]
    assert q["steps"] == [1, 2] and q["seeds"] == [3, 2]
    assert q["median"] == pytest.approx([0.5, 1.0])
    assert q["q1"] == pytest.approx([0.35, 0.5]) and q["q3"] == pytest.approx([0.75, 1.5])
    assert gdpo["ratios"]["format"]["quartiles"]["median"] == pytest.approx([0.5, 0.75])
    s = gdpo["ratios"]["length"]["summary"]
    assert (s["undefined"], s["missing"], s["zeros"], s["has_cap"]) == (1, 0, 1, False)
    assert s["in_band"] == [0, 1, 2]    # in [0.5, 2], both ends included
    # No cap: every step with both rewards active is "before it" (seed 1's step 2, length active nowhere, is not).
    assert s["before"] == s["uncapped"] == {"steps": 4, "in_band": 3, "range": pytest.approx([0.2, 2.0])}
    assert gdpo["caps"] == {"correct": None, "format": None, "length": None}

    # The weights enter squared, on both sides: DARA seed 1, step 1, is (25 * 0.04) / (4 * 0.2) = 1.25;
    # Static-Asym's fixed weight 5 on length gives 25 * 0.1 / 0.5 = 5.
    series = {r["seed"]: r for r in dara["ratios"]["length"]["runs"]}
    assert series[0]["ratios"] == pytest.approx([1.0, 0.0125 * 4.99996 ** 2 / 0.5, 1.0])
    assert series[1]["ratios"] == pytest.approx([1.25, 0.0, 0.25 * 1.4142 ** 2 / 0.5])
    assert dara["ratios"]["length"]["quartiles"]["median"] == pytest.approx([1.125, 0.0125 * 4.99996 ** 2 / 1.0,
                                                                             (1.0 + 0.25 * 1.4142 ** 2 / 0.5) / 2])
    assert static["ratios"]["length"]["quartiles"]["median"] == pytest.approx([5.0])
    assert dara["ratios"]["format"]["runs"][1]["ratios"] == pytest.approx([1.0, 4.99 ** 2, 1.0])

    # The cap: DARA's default 5, binding at a weight of 5 within rounding while the reward is active (not at
    # 4.99, not where the reward is active nowhere).
    assert dara["caps"] == {"correct": 5.0, "format": 5.0, "length": 5.0}
    assert [series[0]["first_bound"], series[1]["first_bound"]] == [2, 1]
    assert [series[0]["bound_steps"], series[1]["bound_steps"]] == [2, 1]
    assert dara["ratios"]["format"]["summary"]["first_bound"] == [] and \
        dara["ratios"]["format"]["summary"]["never_bound"] == 2
    s = dara["ratios"]["length"]["summary"]
    assert s["in_band"] == [3, 2] and s["zeros"] == 1 and s["undefined"] == 0
    assert s["before"] == {"steps": 1, "in_band": 1, "range": pytest.approx([1.0, 1.0])}
    assert s["uncapped"]["steps"] == 2 and s["uncapped"]["in_band"] == 2
    assert s["capped"]["steps"] == 3 and s["capped"]["range"] == pytest.approx([0.0125 * 4.99996 ** 2 / 0.5, 1.25])


def test_the_cap_follows_each_arms_options():
    script = load_script()
    options = ["advantage.method=dara", "advantage.options={max_weight: 3, reward_weights: [1, 1, 2]}"]
    one = run("dara", 0, options, [])
    assert script.caps(one, "toy-budget", []) == {"correct": 3.0, "format": 3.0, "length": 6.0}
    assert script.caps({**one, "overrides": ["advantage.options={max_weight: .inf}"]}, "toy-budget", []) == \
        {"correct": None, "format": None, "length": None}


def test_tables_json_and_picture_next_to_the_results(tmp_path, capsys):
    script = load_script()
    results = tmp_path / "learning-synthetic.json"
    results.write_text(json.dumps(synthetic()))
    script.main(["--results", str(results), "--every", "1"])
    out = capsys.readouterr().out
    assert "| 2 | 1 [0.5-1.5] |" in out    # GDPO's E_length / E_correct at step 2
    saved = json.loads((tmp_path / "energy-ratio-synthetic.json").read_text())
    assert saved["results"] == "learning-synthetic.json"
    assert saved["arms"]["gdpo"]["ratios"]["length"]["quartiles"]["median"] == [0.5, 1.0]
    assert "ratios" not in saved["arms"]["dara"]["ratios"]["length"]["runs"][0]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "energy-ratio-synthetic.png").stat().st_size > 0
