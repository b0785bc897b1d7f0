"""The pre-registered endpoints of the `toy-budget` experiment (benchmarks/LEARNING.md, issue 34), measured as
the paper measures them: the first stable crossing step of the training length compliance for a grid of
thresholds (its Figure 5, as the DARA authors' learning_efficiency.py computes it), and Acc, Exceed and Joint
of the held-out sampled evaluation at the last step (its Tables 3-4); paired by seed, exact permutation tests
with Holm's correction over each family of comparisons, and a non-inferiority margin on accuracy."""
from __future__ import annotations

import math

from paired_tests import holm, mean_difference, permutation_p
from tables import markdown_table, spread

# The Figure 5 metric: a WINDOW-step trailing mean that reaches the threshold and stays there HOLD more steps.
WINDOW = 10
HOLD = 20
LENGTH_REWARD = "length"
THRESHOLDS = (0.5, 0.8, 0.9, 0.95, 0.99)
# The headline's threshold: the strictest one that at least this share of the GDPO runs confirms.
HEADLINE_SHARE = 0.8
REFERENCE = "gdpo"
# Figure 5: DARA against GDPO at every threshold, one Holm family over all the cells.
CROSSING_FAMILY = (("dara", "gdpo"), ("dara-sym", "gdpo"))
# "Competitive" accuracy: non-inferior by MARGIN (one-sided test of a mean difference above -MARGIN; Holm).
MARGIN = 0.02
ACCURACY_FAMILY = (("dara", "gdpo"), ("dara-sym", "gdpo"))
# Table 4: dynamic against static weights on Joint (two-sided; Holm over these two).
JOINT_FAMILY = (("dara", "static-asym"), ("dara-sym", "static-sym"))
FINAL = ("Acc", "Exceed", "Joint")
ALPHA = 0.05


def sustained_crossing(values: list[float], threshold: float, window: int = WINDOW, hold: int = HOLD) -> int | None:
    """values[i] is step i + 1's mean. The first step t whose trailing mean over steps t - window + 1..t is at
    least `threshold` at t and at every step up to t + hold, which the run must have reached (None: no such
    step). As learning_efficiency.py's sustained_crossing."""
    trailing = [math.fsum(values[t - window:t]) / window for t in range(window, len(values) + 1)]
    for i in range(len(trailing) - hold):
        if all(v >= threshold for v in trailing[i:i + hold + 1]):
            return i + window
    return None


def length_values(run: dict) -> list[float]:
    """The training length compliance of steps 1..N (every step present, as the authors' tool requires)."""
    key = f"reward/{LENGTH_REWARD}/mean"
    series = [(r["step"], r[key]) for r in run["records"] if r["step"] >= 1 and r.get(key) is not None]
    if [s for s, _ in series] != list(range(1, run["steps"] + 1)):
        raise SystemExit(f"{run['method']} seed {run['seed']}: the {LENGTH_REWARD} mean is missing at some step")
    return [v for _, v in series]


def crossings(run: dict, thresholds=THRESHOLDS, window: int = WINDOW, hold: int = HOLD) -> dict:
    """threshold -> first stable crossing step (None when there is none)."""
    values = length_values(run)
    return {t: sustained_crossing(values, t, window, hold) for t in thresholds}


def sampled_eval(run: dict, step: int | None = None) -> dict:
    """Acc, Exceed and Joint of the sampled replies of the evaluation at `step` (default: the last), the
    counts behind them, and the task's correct on hard and other prompts."""
    evals = [r for r in run["records"] if "eval_sampled/correct" in r and (step is None or r["step"] == step)]
    if not evals:
        raise SystemExit(f"{run['method']} seed {run['seed']} has no sampled evaluation at step {step}")
    last = evals[-1]
    out = {"step": last["step"], "prompts": last["eval_sampled/prompts"], "replies": last["eval_sampled/replies"],
           "Acc": last["eval_sampled/correct"], "Exceed": 1 - last[f"eval_sampled/{LENGTH_REWARD}"],
           "Joint": last["eval_sampled/joint"]}
    out.update({k[len("eval_sampled/"):]: v for k, v in last.items() if k.startswith("eval_sampled/correct_")})
    return out


def paired(by_method: dict, a: str, b: str, value) -> list[float]:
    """value(run of a) - value(run of b) per seed both have, in seed order."""
    theirs = {r["seed"]: value(r) for r in by_method[b]}
    return [value(r) - theirs[r["seed"]] for r in sorted(by_method[a], key=lambda r: r["seed"]) if r["seed"] in theirs]


def headline_threshold(steps: dict) -> float | None:
    """The strictest threshold that at least HEADLINE_SHARE of the reference (GDPO) runs confirm."""
    runs = list(steps.get(REFERENCE, {}).values())
    confirmed = [t for t in THRESHOLDS if runs and sum(c[t] is not None for c in runs) >= HEADLINE_SHARE * len(runs)]
    return max(confirmed, default=None)


def crossing_family(by_method: dict, steps: dict, never: int) -> dict:
    """(A, B, threshold) -> paired step differences (never confirmed: `never`), two-sided p, Holm over the
    family, and the median per-seed ratio A / B."""
    import numpy as np

    cells = [(a, b, t) for a, b in CROSSING_FAMILY if a in steps and b in steps for t in THRESHOLDS]
    out = {}
    for a, b, t in cells:
        d = paired(by_method, a, b, lambda r, t=t: steps[r["method"]][r["seed"]][t] or never)
        ratio = float(np.median([(steps[a][s][t] or never) / (steps[b][s][t] or never) for s in steps[a]
                                 if s in steps[b]]))
        out[(a, b, t)] = {"differences": d, "p": permutation_p(d), "ratio": ratio}
    for cell, h in zip(out, holm([c["p"] for c in out.values()])):
        out[cell]["holm"] = h
    return out


def final_family(by_method: dict, family, metric: str, margin: float | None = None, step: int | None = None) -> dict:
    """(A, B) -> paired differences of `metric` at the evaluation of `step` (default: the last), their t
    interval, and the exact p: two-sided, or with `margin` one-sided against a mean difference of -margin or
    less; Holm over the family."""
    out = {}
    for a, b in family:
        if a in by_method and b in by_method:
            d = paired(by_method, a, b, lambda r: sampled_eval(r, step)[metric])
            p = permutation_p([x + margin for x in d], greater=True) if margin is not None else permutation_p(d)
            out[(a, b)] = {"differences": d, "p": p, **mean_difference(d)}
    for pair, h in zip(out, holm([c["p"] for c in out.values()])):
        out[pair]["holm"] = h
    return out


def evaluated_steps(by_method: dict) -> list[int]:
    """The steps of the runs' sampled evaluations, in order."""
    return sorted({rec["step"] for runs in by_method.values() for r in runs for rec in r["records"]
                   if "eval_sampled/correct" in rec})


def print_crossing_steps(steps: dict, never: int) -> None:
    """Per method and threshold: the median [IQR] crossing step and how many runs confirm it."""
    import numpy as np

    print(f"\nFirst stable crossing of the training {LENGTH_REWARD} compliance (the paper's Figure 5): the first step"
          f" whose {WINDOW}-step trailing mean reaches the threshold and stays there for the next {HOLD} steps;"
          f" median [IQR] over seeds, (confirmed/runs); a run that never confirms it counts as {never}\n")
    rows = []
    for method, by_seed in steps.items():
        cells = []
        for t in THRESHOLDS:
            values = [c[t] or never for c in by_seed.values()]
            q1, q2, q3 = np.percentile(values, [25, 50, 75])
            cells.append(f"{q2:.1f} [{q1:.0f}-{q3:.0f}] ({sum(c[t] is not None for c in by_seed.values())}"
                         f"/{len(values)})")
        rows.append([method, *cells])
    markdown_table(["method", *(f">= {t:g}" for t in THRESHOLDS)], rows)


def print_crossing_family(family: dict, role: str = "the pre-registered family") -> None:
    """crossing_family()'s cells: one row per pair, one column per threshold."""
    import numpy as np

    if not family:
        return
    print(f"\nPaired by seed, A against B, crossing steps: mean of A - B [median per-seed ratio A / B];"
          f" wins-losses-ties of A crossing sooner; exact two-sided paired permutation p; Holm-adjusted over"
          f" the {len(family)} cells ({role})\n")
    rows = {}
    for (a, b, _), c in family.items():
        d = c["differences"]
        wins, losses = sum(x < 0 for x in d), sum(x > 0 for x in d)
        rows.setdefault((a, b), []).append(f"{np.mean(d):+.1f} [{c['ratio']:.2f}]; {wins}-{losses}-"
                                           f"{len(d) - wins - losses}; p={c['p']:.3g}, Holm {c['holm']:.3g}")
    markdown_table(["A vs B", *(f">= {t:g}" for t in THRESHOLDS)],
                   [[f"{a} vs {b}", *r] for (a, b), r in rows.items()])


def print_evaluations(by_method: dict, shown: list[int], last: int) -> None:
    """The held-out sampled evaluation at each step of `shown` (`last`: the endpoint's), per method."""
    for step in shown:
        finals = {m: [sampled_eval(r, step) for r in sorted(runs, key=lambda r: r["seed"])]
                  for m, runs in by_method.items()}
        first = next(iter(finals.values()))[0]
        extra = sorted(k for k in first if k.startswith("correct_"))
        role = "the endpoint" if step == last else "not the endpoint"
        print(f"\nHeld-out evaluation at step {step} ({role}), sampled at the training temperature:"
              f" {first['prompts']} prompts x {first['replies'] // first['prompts']} replies = {first['replies']}"
              " replies per run; Acc: correct;"
              " Exceed: over the length limit or unfinished; Joint: every reward satisfied by the same reply"
              f"{'; ' + ', '.join(extra) + ': correct on the hard and on the other prompts' if extra else ''};"
              " median [min-max] over seeds\n")
        markdown_table(["method", "seeds", *FINAL, *extra],
                       [[m, str(len(f)), *(spread([x[n] for x in f], 3) for n in [*FINAL, *extra])]
                        for m, f in finals.items()])


def print_budget_tables(by_method: dict, never: int) -> dict:
    """Prints the endpoint tables and the pre-registered verdicts; returns the families' results."""
    steps = {m: {r["seed"]: crossings(r) for r in runs} for m, runs in by_method.items()}
    print_crossing_steps(steps, never)
    results = {"crossing": crossing_family(by_method, steps, never)}
    print_crossing_family(results["crossing"])

    evaluated = evaluated_steps(by_method)
    print_evaluations(by_method, [evaluated[-1], *(s for s in evaluated[1:-1] if s)][:2], evaluated[-1])

    results["accuracy"] = final_family(by_method, ACCURACY_FAMILY, "Acc", MARGIN)
    results["joint"] = final_family(by_method, JOINT_FAMILY, "Joint")
    other = [s for s in evaluated[1:-1] if s][:1]
    for title, family, metric, margin in (
            (f"Acc, non-inferiority by {MARGIN:g}: p one-sided, against a mean difference of -{MARGIN:g} or less",
             ACCURACY_FAMILY, "Acc", MARGIN),
            ("Joint, dynamic against static weights (Table 4): p two-sided", JOINT_FAMILY, "Joint", None)):
        cuts = {step: final_family(by_method, family, metric, margin, step) for step in [evaluated[-1], *other]}
        if not cuts[evaluated[-1]]:
            continue
        print(f"\n{title}; paired by seed, A - B: mean [95% Student t interval]; seeds with A above / below B;"
              " exact paired permutation p, Holm-adjusted over the family's rows; the pre-registered endpoint is"
              f" the last evaluation (step {evaluated[-1]}), the other step is beside it\n")
        markdown_table(["A vs B", "step", "difference", "seeds above / below", "p", "Holm"], [
            [f"{a} vs {b}", str(step), f"{c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]",
             f"{sum(x > 0 for x in c['differences'])} / {sum(x < 0 for x in c['differences'])}",
             f"{c['p']:.3g}", f"{c['holm']:.3g}"] for step, family_at in cuts.items()
            for (a, b), c in family_at.items()])
    print_verdicts(results, headline_threshold(steps))
    return results


def print_verdicts(results: dict, threshold: float | None) -> None:
    """The pre-registered decision rules (benchmarks/LEARNING.md), applied."""
    print(f"\nPre-registered verdicts (alpha {ALPHA:g} after Holm):")
    if threshold is None:
        print(f"- length headline: could not be tested: no threshold is confirmed by {HEADLINE_SHARE:.0%} of the"
              f" {REFERENCE} runs")
    for a, b in CROSSING_FAMILY:
        cell = results["crossing"].get((a, b, threshold))
        accuracy = results["accuracy"].get((a, b))
        if cell is None or accuracy is None:
            continue
        sooner = cell["holm"] < ALPHA and sum(cell["differences"]) < 0
        later = cell["holm"] < ALPHA and sum(cell["differences"]) > 0
        competitive = accuracy["holm"] < ALPHA
        speed = "sooner" if sooner else "later" if later else "not shown sooner"
        verdict = ("held" if sooner and competitive else "partly: sooner, accuracy not shown non-inferior"
                   if sooner else "failed")
        print(f"- length headline, {a} vs {b} at >= {threshold:g}: {verdict} (crossing {speed}, Holm p ="
              f" {cell['holm']:.3g}, median ratio {cell['ratio']:.2f}; Acc {accuracy['mean']:+.3f}"
              f" [{accuracy['low']:+.3f}, {accuracy['high']:+.3f}], non-inferiority Holm p = {accuracy['holm']:.3g})")
    for (a, b), c in results["joint"].items():
        higher = c["holm"] < ALPHA and c["mean"] > 0
        lower = c["holm"] < ALPHA and c["mean"] < 0
        verdict = "held: higher" if higher else "reversed: lower" if lower else "not shown: no difference at alpha"
        print(f"- Table 4 Joint, {a} vs {b}: {verdict} ({c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}],"
              f" Holm p = {c['holm']:.3g})")
