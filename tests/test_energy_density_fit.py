"""benchmarks/energy_density_fit.py on synthetic logged steps: the slope of E_k / n against pi_k through the origin,
R^2, the per-step ratio, the steps left out (no trained-group count, pi_k = 0) and counted (pi_k = 0 with
energy), and the refusal of an arm whose weights are not 1. The fit of the committed runs is in
benchmarks/LEARNING.md."""
import pytest

from tests.benchmark_scripts import load_benchmark


def record(step, groups, **rewards):
    """rewards: name -> (density, energy[, weight])."""
    out = {"step": step, "sampling/trained_groups": groups}
    for name, (density, energy, *weight) in rewards.items():
        out.update({f"density/{name}": density, f"weighted_energy/{name}": energy,
                    f"weight/{name}": weight[0] if weight else 1.0})
    return out


def results(*runs):
    return {"preset": "toy", "runs": [{"method": m, "seed": s, "rewards": ["correct", "length"], "records": r}
                                      for m, s, r in runs]}


def test_an_exact_relation_fits_with_its_slope():
    fit = load_benchmark("energy_density_fit")
    data = results(("gdpo", 0, [record(1, 32, correct=(1.0, 480.0), length=(0.5, 240.0)),
                                record(2, 16, correct=(0.25, 60.0), length=(0.125, 30.0))]),
                   ("gdpo", 1, [record(1, 32, correct=(0.5, 240.0), length=(0.0, 0.0))]),
                   ("dara", 0, [record(1, 32, correct=(1.0, 1.0, 3.0), length=(0.5, 9.0, 2.0))]))
    out = fit.analyse(data)
    assert out["seeds"] == [0, 1]
    correct, length = out["rewards"]["correct"], out["rewards"]["length"]
    assert correct["slope"] == pytest.approx(15.0) and correct["r2"] == pytest.approx(1.0)
    assert correct["steps"] == 3 and correct["ratio_range"] == [15.0, 15.0]
    assert correct["density_range"] == [0.25, 1.0]
    # pi = 0 with no energy is left out, not counted as a violation.
    assert length["steps"] == 2 and length["zero_density_with_energy"] == 0


def test_slope_r2_and_ratios_of_a_noisy_relation():
    fit = load_benchmark("energy_density_fit")
    pairs = [(0.2, 3.2), (0.5, 7.5), (1.0, 14.0)]
    out = fit.fit(pairs)
    slope = (0.2 * 3.2 + 0.5 * 7.5 + 14) / (0.04 + 0.25 + 1.0)
    assert out["slope"] == pytest.approx(slope)
    mean = 24.7 / 3
    ss_tot = sum((y - mean) ** 2 for _, y in pairs)
    ss_res = sum((y - slope * x) ** 2 for x, y in pairs)
    assert out["r2"] == pytest.approx(1 - ss_res / ss_tot)
    assert out["ratio_median"] == pytest.approx(15.0) and out["ratio_range"] == pytest.approx([14.0, 16.0])


def test_steps_without_groups_are_left_out_and_energy_without_density_is_counted():
    fit = load_benchmark("energy_density_fit")
    data = results(("gdpo", 0, [record(1, 0, correct=(1.0, 1.0), length=(1.0, 1.0)),
                                {"step": 2, "density/correct": 1.0},
                                record(3, 2, correct=(0.5, 15.0), length=(0.0, 3.0)),
                                record(4, 2, correct=(1.0, 30.0), length=(0.5, 15.0))]))
    out = fit.analyse(data)
    assert out["rewards"]["correct"]["steps"] == 2
    assert out["rewards"]["length"]["steps"] == 1 and out["rewards"]["length"]["zero_density_with_energy"] == 1


def test_an_arm_with_other_weights_is_refused():
    fit = load_benchmark("energy_density_fit")
    data = results(("dara", 0, [record(1, 4, correct=(1.0, 60.0, 1.0), length=(0.25, 60.0, 2.0))]))
    with pytest.raises(SystemExit, match="weight is 2.0, not 1"):
        fit.analyse(data, "dara")
    with pytest.raises(SystemExit, match="no gdpo runs"):
        fit.analyse(data)
