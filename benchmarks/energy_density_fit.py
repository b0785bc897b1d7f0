"""The paper's relation behind Figure 8, checked on logged batches: under GDPO each reward's advantage energy
E_k = sum_j A_jk^2 is proportional to its active-group density pi_k. Within a group where reward k varies, the
GDPO-normalised values have a sum of squares of G sigma^2 / (sigma + eps)^2 (G - 1 with the unbiased std), and
0 where it does not vary, so E_k = c * n * pi_k with n the step's groups and c about G (or G - 1).

    python benchmarks/energy_density_fit.py [--results benchmarks/results/learning-toy-length-dense.json]
        [--method gdpo] [--json PATH]

Per reward, over every logged step of every seed of the arm: the least-squares slope of E_k / n against pi_k
through the origin (c), its coefficient of determination R^2 = 1 - SS_res / SS_tot (about the mean), the
median and range of the per-step ratio E_k / (n pi_k), and the steps used. E_k is the logged
`weighted_energy/<reward>` (under GDPO every weight is 1, so it is E_k itself; an arm with other weights is
refused), pi_k `density/<reward>`, n `sampling/trained_groups`; a step without all three, or with pi_k = 0, is
left out of the ratio (its energy must then be 0: counted and reported)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_speed import base_method  # noqa: E402
from tables import markdown_table  # noqa: E402

DEFAULT_RESULTS = Path(__file__).resolve().parent / "results" / "learning-toy-length-dense.json"
# Logged weights are rounded to 4 decimals.
UNIT_WEIGHT = 1e-3


def points(runs: list[dict], reward: str) -> tuple[list[tuple[float, float]], int]:
    """(pi_k, E_k / n) of every step that logs all three values, and the count of steps with pi_k = 0 and
    nonzero energy (which the relation says cannot happen)."""
    out, violations = [], 0
    for run in runs:
        for record in run["records"]:
            density = record.get(f"density/{reward}")
            energy = record.get(f"weighted_energy/{reward}")
            groups = record.get("sampling/trained_groups")
            if density is None or energy is None or not groups:
                continue
            weight = record.get(f"weight/{reward}")
            if weight is not None and density > 0 and abs(weight - 1.0) > UNIT_WEIGHT:
                raise SystemExit(f"{run['method']} seed {run['seed']} step {record['step']}: {reward}'s weight is "
                                 f"{weight}, not 1: the relation is GDPO's (every weight 1)")
            if density == 0:
                violations += energy != 0
                continue
            out.append((density, energy / groups))
    return out, violations


def fit(pairs: list[tuple[float, float]]) -> dict:
    """y = c x through the origin: c, R^2 about the mean of y, and the per-point ratios y / x."""
    sxx = sum(x * x for x, _ in pairs)
    c = sum(x * y for x, y in pairs) / sxx
    mean = sum(y for _, y in pairs) / len(pairs)
    ss_tot = sum((y - mean) ** 2 for _, y in pairs)
    ss_res = sum((y - c * x) ** 2 for x, y in pairs)
    ratios = sorted(y / x for x, y in pairs)
    return {"slope": c, "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"), "steps": len(pairs),
            "ratio_median": ratios[len(ratios) // 2], "ratio_range": [ratios[0], ratios[-1]],
            "density_range": [min(x for x, _ in pairs), max(x for x, _ in pairs)]}


def analyse(data: dict, method: str = "gdpo") -> dict:
    runs = [r for r in data["runs"] if base_method(r["method"]) == method]
    if not runs:
        raise SystemExit(f"the results file has no {method} runs")
    result = {"preset": data["preset"], "method": method, "seeds": sorted({r["seed"] for r in runs}), "rewards": {}}
    for reward in runs[0]["rewards"]:
        pairs, violations = points(runs, reward)
        if not pairs:
            raise SystemExit(f"{reward}: no step logs density, weighted_energy and sampling/trained_groups")
        result["rewards"][reward] = {**fit(pairs), "zero_density_with_energy": violations}
    return result


def print_report(result: dict) -> None:
    print(f"\npreset {result['preset']}, {result['method']} ({len(result['seeds'])} seeds): E_k / n = c pi_k "
          "fitted through the origin over every logged step\n")
    markdown_table(["reward", "steps", "pi_k range", "slope c", "R^2", "E_k / (n pi_k): median [range]",
                    "pi_k = 0 with E_k > 0"],
                   [[name, str(r["steps"]), "{:.3f}-{:.3f}".format(*r["density_range"]), f"{r['slope']:.4g}",
                     f"{r['r2']:.6f}",
                     f"{r['ratio_median']:.4g} [{r['ratio_range'][0]:.4g}-{r['ratio_range'][1]:.4g}]",
                     str(r["zero_density_with_energy"])]
                    for name, r in result["rewards"].items()])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="a learning_speed.py results file")
    parser.add_argument("--method", default="gdpo", help="the arm (its weights must all be 1)")
    parser.add_argument("--json", type=Path, help="where to write the fit (default: energy-density-<name>.json "
                        "next to the results file)")
    args = parser.parse_args(argv)
    result = analyse(json.loads(args.results.read_text()), args.method)
    print_report(result)
    out = args.json or args.results.parent / f"energy-density-{args.results.stem.removeprefix('learning-')}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nfit: {out}")


if __name__ == "__main__":
    main()
