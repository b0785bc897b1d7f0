"""The pre-registered endpoints of the `toy-budget` experiment (benchmarks/LEARNING.md, issue 34), measured as
the paper measures them: the first stable crossing step of the training length compliance for a grid of
thresholds (its Figure 5, as the DARA authors' learning_efficiency.py computes it), and Acc, Exceed and Joint
of the held-out sampled evaluation at the last step (its Tables 3-4); paired by seed, exact permutation tests
with Holm's correction over each family of comparisons, and a non-inferiority margin on accuracy."""
from __future__ import annotations

import math

from paired_tests import holm, mean_difference, permutation_p

# The Figure 5 metric: a WINDOW-step trailing mean that reaches the threshold and stays there HOLD more steps.
WINDOW = 10
HOLD = 20
LENGTH_REWARD = "length"
THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95)
# Figure 5 (Holm over every cell): DARA against GDPO at every threshold.
CROSSING_FAMILY = (("dara", "gdpo"), ("dara-sym", "gdpo"))
# Table 4: dynamic against static weights on Joint (Holm over these two).
JOINT_FAMILY = (("dara", "static-asym"), ("dara-sym", "static-sym"))
# "Competitive" accuracy: the 95% interval of the paired difference A - B lies above -MARGIN.
MARGIN = 0.02
ACCURACY_FAMILY = (("dara", "gdpo"), ("dara-sym", "gdpo"))
FINAL = (("Acc", "correct"), ("Exceed", None), ("Joint", "joint"))


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


def crossings(run: dict, never: int) -> dict:
    """threshold -> first stable crossing step (`never` when there is none)."""
    values = length_values(run)
    return {t: (s if (s := sustained_crossing(values, t)) is not None else never) for t in THRESHOLDS}


def final_sampled(run: dict) -> dict:
    """Acc, Exceed and Joint of the last evaluation's sampled replies, and the counts behind them."""
    last = [r for r in run["records"] if "eval_sampled/correct" in r][-1]
    out = {"step": last["step"], "prompts": last["eval_sampled/prompts"], "replies": last["eval_sampled/replies"]}
    out.update({name: (1 - last[f"eval_sampled/{LENGTH_REWARD}"] if key is None else last[f"eval_sampled/{key}"])
                for name, key in FINAL})
    out.update({k[len("eval_sampled/"):]: v for k, v in last.items() if k.startswith("eval_sampled/correct_")})
    return out


def paired(by_method: dict, a: str, b: str, value) -> list[float]:
    """value(run of a) - value(run of b) per seed both have, in seed order."""
    theirs = {r["seed"]: value(r) for r in by_method[b]}
    return [value(r) - theirs[r["seed"]] for r in sorted(by_method[a], key=lambda r: r["seed"]) if r["seed"] in theirs]


def spread(values: list[float], digits: int) -> str:
    import numpy as np

    return f"{np.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def markdown_table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def print_budget_tables(by_method: dict, never: int) -> dict:
    """Prints the endpoint tables; returns the family results (for the tests)."""
    import numpy as np

    steps = {m: {r["seed"]: crossings(r, never) for r in runs} for m, runs in by_method.items()}
    print(f"\nFirst stable crossing of the training {LENGTH_REWARD} compliance (the paper's Figure 5): the first step"
          f" whose {WINDOW}-step trailing mean reaches the threshold and stays there for the next {HOLD} steps;"
          f" median [IQR] over seeds, (reached/runs); none: {never}\n")
    rows = []
    for method, by_seed in steps.items():
        cells = []
        for t in THRESHOLDS:
            values = [c[t] for c in by_seed.values()]
            q1, q2, q3 = np.percentile(values, [25, 50, 75])
            cells.append(f"{q2:.1f} [{q1:.0f}-{q3:.0f}] ({sum(v < never for v in values)}/{len(values)})")
        rows.append([method, *cells])
    markdown_table(["method", *(f">= {t:g}" for t in THRESHOLDS)], rows)

    results = {}
    present = [(a, b) for a, b in CROSSING_FAMILY if a in by_method and b in by_method]
    if present:
        cells = [(a, b, t, paired(by_method, a, b, lambda r, t=t: crossings(r, never)[t]))
                 for a, b in present for t in THRESHOLDS]
        ps = [permutation_p(d) for *_, d in cells]
        adjusted = holm(ps)
        print(f"\nPaired by seed, A against B, crossing steps: A - B mean [median ratio A/B]; wins-losses-ties of A"
              f" crossing sooner; exact two-sided paired permutation p; Holm-adjusted over the {len(ps)} cells"
              " (pre-registered family)\n")
        rows = {}
        for (a, b, t, d), p, h in zip(cells, ps, adjusted):
            ratio = np.median([steps[a][seed][t] / steps[b][seed][t] for seed in steps[a] if seed in steps[b]])
            wins, losses = sum(x < 0 for x in d), sum(x > 0 for x in d)
            rows.setdefault((a, b), []).append(
                f"{np.mean(d):+.1f} [{ratio:.2f}]; {wins}-{losses}-{len(d) - wins - losses}; p={p:.3g}, Holm {h:.3g}")
            results[(a, b, t)] = {"differences": d, "p": p, "holm": h, "ratio": ratio}
        markdown_table(["A vs B", *(f">= {t:g}" for t in THRESHOLDS)],
                       [[f"{a} vs {b}", *r] for (a, b), r in rows.items()])

    finals = {m: [final_sampled(r) for r in sorted(runs, key=lambda r: r["seed"])] for m, runs in by_method.items()}
    first = next(iter(finals.values()))[0]
    extra = sorted(k for k in first if k.startswith("correct_"))
    print(f"\nHeld-out evaluation at step {first['step']}, sampled at the training temperature: {first['prompts']}"
          f" prompts x {first['replies'] // first['prompts']} replies = {first['replies']} replies per run; Acc:"
          f" correct, Exceed: over the length limit or unfinished, Joint: every reward satisfied by the same reply"
          f"{', ' + ', '.join(extra) + ': correct on the hard and the other prompts' if extra else ''}; median"
          " [min-max] over seeds\n")
    markdown_table(["method", "seeds", *(n for n, _ in FINAL), *extra],
                   [[m, str(len(f)), *(spread([x[n] for x in f], 3) for n in [*(n for n, _ in FINAL), *extra])]
                    for m, f in finals.items()])

    for title, family in (("Accuracy, non-inferiority margin " + f"{MARGIN:g}", ACCURACY_FAMILY),
                          ("Joint, dynamic against static weights (Table 4)", JOINT_FAMILY)):
        present = [(a, b) for a, b in family if a in by_method and b in by_method]
        if not present:
            continue
        print(f"\n{title}: paired by seed, A - B at the last evaluation, mean [95% Student t interval]; seeds with"
              " A above B; exact two-sided paired permutation p, Holm-adjusted over the pre-registered family"
              " (the row's metric in the rows of its family); the other metrics beside it are not tested\n")
        table = {}
        for name, _ in FINAL:
            diffs = [(a, b, paired(by_method, a, b, lambda r, n=name: final_sampled(r)[n])) for a, b in present]
            ps = [permutation_p(d) for *_, d in diffs]
            for (a, b, d), p, h in zip(diffs, ps, holm(ps)):
                ci = mean_difference(d)
                table.setdefault((a, b), []).append(
                    f"{ci['mean']:+.3f} [{ci['low']:+.3f}, {ci['high']:+.3f}]; {sum(x > 0 for x in d)}/{len(d)};"
                    f" p={p:.3g}, Holm {h:.3g}")
                results[(title.split(",")[0], name, a, b)] = {"differences": d, "p": p, "holm": h, **ci}
        markdown_table(["A vs B", *(n for n, _ in FINAL)], [[f"{a} vs {b}", *r] for (a, b), r in table.items()])
    return results
