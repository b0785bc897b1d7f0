"""The paper's Figure 8 mechanism on logged runs: per reward k the energy estimate E_k = w_k^2 pi_k (the logged
weight and active-group density of each step), and per arm, per step, the median and interquartile range over
seeds of E_k / E_correct for every other reward (length, and format where the task has it).

    python benchmarks/energy_ratio.py [--results benchmarks/results/learning-toy-budget.json]
        [--json PATH] [--plot PNG] [--every 10]

Under GDPO (every w = 1) the ratio is pi_k / pi_correct. DARA's weight w_k = b_k min(cap, (pi_k / max_l
pi_l)^-1/2) (docs/spec.md, Weights; with density_floor 0) makes w_k^2 pi_k = b_k^2 max_l pi_l for every reward
below its cap, so the ratio is b_k^2 / b_correct^2 (1 for the paper's arms) until the cap binds on one of the two
rewards: the cap is
b_k * max_weight (the arm's `advantage.options`, else the method's default: 5 for `dara`, none for the other
methods), and it binds at a step where the logged weight equals it within rounding while the reward is active
in some group (a reward active nowhere is reported at the cap, docs/spec.md, and has E = 0 whatever its
weight). Reported per arm: the steps per seed with the ratio in [0.5, 2], the first step per seed at which the
cap binds on either reward of the ratio, and the ratio on the steps before it and on every step where neither
is capped. A step at which correctness is active in no group (pi_correct = 0) has no ratio: it is left out for
that seed and counted. A reward active nowhere has E = 0, a ratio of 0 (counted; drawn at the picture's floor).

The arms are the runs' `method` labels (learning_speed.py: `dara` is DARA-Asym, `dara-sym` DARA-Sym, `static-asym`
and `static-sym` the fixed weights of `--static-weights`); each run's `overrides` (with the file's `settings`)
over its preset give the method and options the cap is read from. The JSON (default: energy-ratio-<name>.json
next to the results file, for learning-<name>.json) holds every step's quartiles and the summaries; the PNG
(default: the same name, .png) draws the median and interquartile band per arm on a log axis."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_speed import base_method, group_suffix, quartiles  # noqa: E402
from tables import markdown_table, spread  # noqa: E402

DEFAULT_RESULTS = Path(__file__).resolve().parent / "results" / "learning-toy-budget.json"
REFERENCE = "correct"
# Shown before the others, in this order, where the task has them.
FIRST = ("length", "format")
BAND = (0.5, 2.0)
# Logged weights are rounded to 4 decimals; DARA's weights below the cap are sqrt of a ratio of group counts,
# never within this of 5 unless equal to it.
CAP_ROUNDING = 1e-3
# A ratio of 0 (the reward active nowhere) is drawn at this value on the log axis.
PLOT_FLOOR = 1e-2
JSON_DIGITS = 4
ARM_NAMES = {"dara": "DARA-Asym", "dara-sym": "DARA-Sym", "gdpo": "GDPO", "static-asym": "Static-Asym",
             "static-sym": "Static-Sym", "grpo": "GRPO"}


def arm_name(label: str) -> str:
    """The paper's name of a learning_speed.py method label (`dara@G16` -> `DARA-Asym@G16`)."""
    return ARM_NAMES.get(base_method(label), base_method(label)) + group_suffix(label)


def energy(record: dict, reward: str) -> float | None:
    """E = w^2 pi of one logged step (None where the step logs no weight or density for the reward)."""
    weight, density = record.get(f"weight/{reward}"), record.get(f"density/{reward}")
    if weight is None or density is None:
        return None
    return weight ** 2 * density


def step_ratio(record: dict, reward: str, reference: str = REFERENCE) -> float | None:
    """E_reward / E_reference at one step; None where it is undefined (the reference active nowhere, or a
    value not logged)."""
    mine, ref = energy(record, reward), energy(record, reference)
    if mine is None or ref is None or ref <= 0:
        return None
    return mine / ref


def caps(run: dict, preset: str, settings: list[str]) -> dict[str, float | None]:
    """reward -> the weight at which the run's cap binds (b_k * max_weight), None where it has none."""
    from dara_kernels.wire import METHOD_TRAITS
    from dara_train.config import load_config

    advantage = load_config(preset, None, [*settings, *run["overrides"]]).advantage
    options = advantage.options or {}
    cap = options.get("max_weight", METHOD_TRAITS[advantage.method].options.get("max_weight"))
    if cap is None or not math.isfinite(cap):
        return {name: None for name in run["rewards"]}
    coefficients = options.get("reward_weights") or [1.0] * len(run["rewards"])
    return {name: float(b) * cap for name, b in zip(run["rewards"], coefficients)}


def capped(record: dict, reward: str, cap: float | None) -> bool:
    """Whether the cap binds on the reward at this step: its weight equals the cap within rounding while it is
    active in some group."""
    weight, density = record.get(f"weight/{reward}"), record.get(f"density/{reward}")
    return (cap is not None and weight is not None and density is not None and density > 0
            and abs(weight - cap) <= CAP_ROUNDING)


def training_steps(run: dict, reference: str = REFERENCE) -> list[dict]:
    return [r for r in run["records"] if r["step"] >= 1 and f"density/{reference}" in r]


def in_band(value: float) -> bool:
    return BAND[0] <= value <= BAND[1]


def run_series(run: dict, reward: str, cap: dict, reference: str = REFERENCE) -> dict:
    """One run's ratio per step and its summary: steps in BAND, the first step the cap binds on either reward,
    and the ratios of the steps with both rewards active before it and at which neither reward is capped."""
    steps, ratios, bound = [], [], []
    undefined = missing = zeros = 0
    for record in training_steps(run, reference):
        value = step_ratio(record, reward, reference)
        if value is None:
            if energy(record, reference) == 0:
                undefined += 1
            else:
                missing += 1
            continue
        zeros += value == 0
        steps.append(record["step"])
        ratios.append(value)
        bound.append(capped(record, reward, cap[reward]) or capped(record, reference, cap[reference]))
    first_bound = next((s for s, b in zip(steps, bound) if b), None)
    # Both rewards active (a ratio of 0 is counted in `zeros`), before the first capped step / at no capped step.
    before = [v for s, v in zip(steps, ratios) if v > 0 and (first_bound is None or s < first_bound)]
    free = [v for v, b in zip(ratios, bound) if v > 0 and not b]
    held = [v for v, b in zip(ratios, bound) if b]
    return {"seed": run["seed"], "steps": steps, "ratios": ratios, "undefined": undefined, "missing": missing,
            "zeros": zeros,
            "in_band": sum(map(in_band, ratios)), "first_bound": first_bound, "bound_steps": sum(bound),
            **{part: {"steps": len(values), "in_band": sum(map(in_band, values)),
                      "range": [min(values), max(values)] if values else None}
               for part, values in (("before", before), ("uncapped", free), ("capped", held))}}


def step_quartiles(series: list[dict]) -> dict:
    """Per step any seed has a ratio at: q1, median, q3 over the seeds that have one, and their count."""
    by_step: dict[int, list[float]] = {}
    for one in series:
        for step, value in zip(one["steps"], one["ratios"]):
            by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    q = [quartiles(by_step[s]) for s in steps]
    return {"steps": steps, "q1": [a for a, _, _ in q], "median": [m for _, m, _ in q], "q3": [c for _, _, c in q],
            "seeds": [len(by_step[s]) for s in steps]}


def ratio_rewards(rewards: list[str], reference: str = REFERENCE) -> list[str]:
    others = [r for r in rewards if r != reference]
    return sorted(others, key=lambda r: (FIRST.index(r) if r in FIRST else len(FIRST), others.index(r)))


def analyse(data: dict, reference: str = REFERENCE) -> dict:
    """{"preset", "reference", "band", "rewards", "arms": label -> {name, method, seeds, caps,
    ratios: reward -> {quartiles, runs, summary}}} for a learning_speed.py results dict."""
    runs = sorted(data["runs"], key=lambda r: r["seed"])
    if not runs:
        raise SystemExit("the results file has no runs")
    rewards = runs[0]["rewards"]
    if reference not in rewards:
        raise SystemExit(f"the runs have no {reference!r} reward (rewards: {', '.join(rewards)})")
    others = ratio_rewards(rewards, reference)
    arms = {}
    for label in dict.fromkeys(r["method"] for r in runs):
        mine = [r for r in runs if r["method"] == label]
        cap = caps(mine[0], data["preset"], data.get("settings", []))
        if any(caps(r, data["preset"], data.get("settings", [])) != cap for r in mine[1:]):
            raise SystemExit(f"{label}: its runs were made with different caps")
        entry = {"name": arm_name(label), "method": label, "seeds": [r["seed"] for r in mine], "caps": cap,
                 "ratios": {}}
        for reward in others:
            series = [run_series(r, reward, cap, reference) for r in mine]
            bound = [s["first_bound"] for s in series if s["first_bound"] is not None]
            median_in_band = [in_band(m) for m in step_quartiles(series)["median"]]
            entry["ratios"][reward] = {
                "quartiles": step_quartiles(series), "runs": series,
                "summary": {
                    "has_cap": cap[reward] is not None or cap[reference] is not None,
                    **{k: sum(s[k] for s in series) for k in ("undefined", "missing", "zeros")},
                    "in_band": [s["in_band"] for s in series], "median_in_band": sum(median_in_band),
                    "median_leaves_band": next((s for s, ok in zip(step_quartiles(series)["steps"], median_in_band)
                                                if not ok), None),
                    "first_bound": bound, "never_bound": len(series) - len(bound),
                    **{part: {"steps": sum(s[part]["steps"] for s in series),
                              "in_band": sum(s[part]["in_band"] for s in series),
                              "range": value_range([s[part]["range"] for s in series])}
                       for part in ("before", "uncapped", "capped")}}}
        arms[label] = entry
    return {"preset": data["preset"], "reference": reference, "band": list(BAND), "rewards": others,
            "arms": arms}


def value_range(ranges: list) -> list[float] | None:
    ranges = [r for r in ranges if r]
    return [min(r[0] for r in ranges), max(r[1] for r in ranges)] if ranges else None


def shown_steps(steps: list[int], every: int) -> list[int]:
    """The first and last step and every `every`-th in between."""
    if not steps:
        return []
    return sorted({steps[0], steps[-1], *(s for s in steps if s % every == 0)})


def cell(q: dict, step: int) -> str:
    if step not in q["steps"]:
        return "-"
    i = q["steps"].index(step)
    return f"{q['median'][i]:.3g} [{q['q1'][i]:.3g}-{q['q3'][i]:.3g}]"


def band_share(part: dict) -> str:
    r = part["range"]
    return f"{part['in_band']}/{part['steps']}" + (f" [{r[0]:.3g}-{r[1]:.3g}]" if r else "")


def print_report(result: dict, every: int = 10) -> None:
    reference, arms = result["reference"], result["arms"]
    low, high = result["band"]
    for reward in result["rewards"]:
        steps = sorted({s for a in arms.values() for s in a["ratios"][reward]["quartiles"]["steps"]})
        print(f"\npreset {result['preset']}: E_{reward} / E_{reference}, E = w^2 pi (logged weight and "
              "active-group density); median [IQR] over seeds, per step\n")
        markdown_table(["step", *(a["name"] for a in arms.values())],
                       [[str(s), *(cell(a["ratios"][reward]["quartiles"], s) for a in arms.values())]
                        for s in shown_steps(steps, every)])
        print(f"\nE_{reward} / E_{reference} in [{low:g}, {high:g}]: steps per seed, median [min-max], and steps "
              "at which the arm's median is in it (first step it is not: out at); the cap binds where a weight of "
              f"either reward equals it (within {CAP_ROUNDING:g}) while the reward is active: the first such step "
              "per seed, median [min-max] (seeds that never bind); of the seed-steps with both rewards active "
              "before that step, and of those at which neither reward is capped: steps in the band / steps, and "
              "the ratio's range, and the same of the seed-steps at which the cap binds; undefined: "
              f"seed-steps without a ratio ({reference} active in no group); zero: seed-steps with {reward} "
              "active in no group\n")
        rows = []
        for arm in arms.values():
            s = arm["ratios"][reward]["summary"]
            leaves = s["median_leaves_band"]
            cap = f"{arm['caps'][reward]:g} / {arm['caps'][reference]:g}" if s["has_cap"] else "none"
            first = (f"{spread(s['first_bound'], 0)} ({s['never_bound']} never)" if s["first_bound"]
                     else f"never ({s['never_bound']})") if s["has_cap"] else "-"

            rows.append([arm["name"], str(len(arm["seeds"])), spread(s["in_band"], 0),
                         f"{s['median_in_band']} ({leaves if leaves is not None else 'never'})", cap, first,
                         *(band_share(s[part]) if s["has_cap"] else "-" for part in ("before", "uncapped", "capped")),
                         str(s["undefined"]) + (f" (+{s['missing']} not logged)" if s["missing"] else ""),
                         str(s["zeros"])])
        markdown_table(["arm", "seeds", "steps in band per seed", "median in band (out at)",
                        f"cap ({reward} / {reference})", "cap binds from step", "before it: in band",
                        "uncapped: in band", "capped: in band", "undefined", "zero"], rows)


def for_json(value, digits: int = JSON_DIGITS):
    """JSON has no NaN (None), and the ratios are kept to `digits` significant digits."""
    if isinstance(value, dict):
        return {k: for_json(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [for_json(v, digits) for v in value]
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else None
    return value


def saved(result: dict, results: Path) -> dict:
    """The analysis as written: per arm and ratio the step quartiles and each seed's summary (its per-step
    ratios are left out: the results file has what they are computed from)."""
    arms = {label: {**arm, "ratios": {reward: {**r, "runs": [{k: v for k, v in run.items()
                                                                    if k not in ("steps", "ratios")}
                                                                   for run in r["runs"]]}
                                     for reward, r in arm["ratios"].items()}}
            for label, arm in result["arms"].items()}
    return for_json({"results": results.name, **result, "arms": arms})


def default_output(results: Path, suffix: str) -> Path:
    name = results.stem.removeprefix("learning-")
    return results.parent / f"energy-ratio-{name}{suffix}"


def plot(result: dict, path: Path) -> Path:
    """Per ratio a panel: per arm the median line and interquartile band on a log axis, BAND shaded, and each
    capped arm's median first cap-binding step as a dotted line in its colour."""
    import numpy as np

    from dara_train.plot import subplots

    rewards, reference = result["rewards"], result["reference"]
    fig, axes = subplots(1, len(rewards), 6.4, 4.4)
    for ax, reward in zip(axes[0], rewards):
        ax.axhspan(*result["band"], color="0.9", lw=0, label=f"[{result['band'][0]:g}, {result['band'][1]:g}]")
        ax.axhline(1.0, color="0.5", lw=0.8)
        for arm in result["arms"].values():
            q, s = arm["ratios"][reward]["quartiles"], arm["ratios"][reward]["summary"]
            shown = lambda values: np.maximum(values, PLOT_FLOOR)
            line, = ax.plot(q["steps"], shown(q["median"]), lw=1.3, label=f"{arm['name']} (n={len(arm['seeds'])})")
            ax.fill_between(q["steps"], shown(q["q1"]), shown(q["q3"]), color=line.get_color(), alpha=0.18, lw=0)
            if s["first_bound"]:
                ax.axvline(float(np.median(s["first_bound"])), color=line.get_color(), ls=":", lw=1.2)
        ax.set_yscale("log")
        ax.set(title=f"E_{reward} / E_{reference}, E = w² π", xlabel="step",
               ylabel=f"median and IQR over seeds (0 drawn at {PLOT_FLOOR:g})")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{result['preset']}: energy ratio per arm (dotted: median first step the DARA cap binds)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help="a learning_speed.py results file (default: the toy-budget one)")
    parser.add_argument("--json", type=Path, help="where to write the analysis (default: energy-ratio-<name>.json "
                        "next to the results file)")
    parser.add_argument("--plot", type=Path, help="where to write the PNG (default: energy-ratio-<name>.png next "
                        "to the results file)")
    parser.add_argument("--every", type=int, default=10, help="the table shows every this many steps")
    args = parser.parse_args(argv)

    data = json.loads(args.results.read_text())
    result = analyse(data)
    print_report(result, args.every)
    out = args.json or default_output(args.results, ".json")
    out.write_text(json.dumps(saved(result, args.results), indent=1) + "\n")
    print(f"\nruns: {args.results}\nanalysis: {out}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no matplotlib: no picture")
        return
    print(f"picture: {plot(result, args.plot or default_output(args.results, '.png'))}")


if __name__ == "__main__":
    main()
