"""The pre-registered endpoints of `toy-length-dense` (issue 39) and of the format ablation on `toy-budget`
(benchmarks/LEARNING.md): the late phase L = c(0.99) - c(0.9) of the training length compliance, where c(t) is
budget_endpoints.py's first stable crossing of t; censoring-aware exact sign tests with Holm's correction over
each family; the paper's Figure-5 crossings in the same form; Acc non-inferiority and Joint at the last step.

Censoring: a crossing that is never confirmed is later than the run's last confirmable step (steps - HOLD), so
it is recorded as "at least last + 1". A late phase whose 0.99 is never confirmed is at least last + 1 - c(0.9);
a run that never confirms the lower end has no late phase. Paired by seed, A against B, the sign of A - B is
taken where it is known: both observed, the sign of the difference; one censored at >= a, the other observed b:
the censored one is larger if b < a, else undetermined; both censored, or a run without the measure:
undetermined."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from budget_endpoints import (
    ACCURACY_FAMILY,
    ALPHA,
    CROSSING_FAMILY,
    HOLD,
    MARGIN,
    THRESHOLDS,
    WINDOW,
    crossing_family,
    crossings,
    evaluated_steps,
    final_family,
    print_crossing_family,
    print_crossing_steps,
    print_evaluations,
)
from paired_tests import holm, permutation_p, sign_test_p
from tables import markdown_table

# The late phase: from the first stable crossing of LOW to that of HIGH.
LATE = (0.9, 0.99)
# P: DARA against GDPO; S4: dynamic against static weights (each Holm over its 2).
PRIMARY_FAMILY = CROSSING_FAMILY
STATIC_FAMILY = (("dara", "static-asym"), ("dara-sym", "static-sym"))
# S3: Joint at the last step, two-sided, Holm over the 4.
JOINT_FAMILY = (*CROSSING_FAMILY, *STATIC_FAMILY)
# What other cut-offs would show (reported, not tested): other ends of the late phase, other crossing rules.
OTHER_ENDS = ((0.8, 0.99), (0.9, 0.95), (0.95, 0.99))
OTHER_RULES = ((5, 10), (20, 20))
# The format ablation (toy-budget without `format`): family A, DARA-Asym against GDPO on L and c(0.99).
ABLATION_PAIR = ("dara", "gdpo")
ABLATED_REWARD = "format"
WITH_FORMAT = Path(__file__).parent / "results" / "learning-toy-budget.json"


@dataclass(frozen=True)
class Observed:
    """A step count; `censored`: only known to be at least `value`."""
    value: int
    censored: bool = False

    def __str__(self) -> str:
        return f">={self.value}" if self.censored else str(self.value)


def last_confirmable(steps: int, hold: int = HOLD) -> int:
    """The last step a crossing can be confirmed at: the trailing mean must hold `hold` more steps."""
    return steps - hold


def crossing_observations(run: dict, window: int = WINDOW, hold: int = HOLD) -> dict:
    """threshold -> Observed crossing step; never confirmed: censored at last confirmable step + 1."""
    censored = Observed(last_confirmable(run["steps"], hold) + 1, True)
    return {t: censored if c is None else Observed(c) for t, c in crossings(run, THRESHOLDS, window, hold).items()}


def late_phase(low: Observed, high: Observed) -> Observed | None:
    """c(high) - c(low): None when the lower end is never confirmed; censored when the upper end is not."""
    if low.censored:
        return None
    return Observed(high.value - low.value, high.censored)


def pair_sign(a: Observed | None, b: Observed | None) -> int | None:
    """The sign of A - B where it is known (-1: A smaller, 0: tie, +1: A larger), else None."""
    if a is None or b is None or (a.censored and b.censored):
        return None
    if a.censored:
        return 1 if b.value < a.value else None
    if b.censored:
        return -1 if a.value < b.value else None
    return (a.value > b.value) - (a.value < b.value)


def observation_table(by_method: dict, window: int = WINDOW, hold: int = HOLD) -> dict:
    """method -> seed -> threshold -> Observed crossing."""
    return {m: {r["seed"]: crossing_observations(r, window, hold) for r in runs} for m, runs in by_method.items()}


def late_measure(low: float, high: float):
    """The measure of a run's crossings that is its late phase from `low` to `high`."""
    return lambda c: late_phase(c[low], c[high])


def crossing_measure(threshold: float):
    return lambda c: c[threshold]


def sign_cell(table: dict, a: str, b: str, measure) -> dict:
    """A against B paired by seed on measure(crossings): per-seed values and signs, sign counts, the exact
    two-sided sign test over the determined untied pairs, and the mean difference over the pairs where both are
    observed with its exact permutation p."""
    seeds = sorted(set(table[a]) & set(table[b]))
    values = {s: (measure(table[a][s]), measure(table[b][s])) for s in seeds}
    signs = {s: pair_sign(*values[s]) for s in seeds}
    lower, higher = sum(v == -1 for v in signs.values()), sum(v == 1 for v in signs.values())
    both = [x.value - y.value for x, y in values.values() if x and y and not x.censored and not y.censored]
    return {"values": values, "signs": signs, "lower": lower, "higher": higher,
            "ties": sum(v == 0 for v in signs.values()), "undetermined": sum(v is None for v in signs.values()),
            "censored": sum(any(v is not None and v.censored for v in pair) for pair in values.values()),
            "p": sign_test_p(lower, higher), "observed_differences": both,
            "mean": math.fsum(both) / len(both) if both else float("nan"), "mean_p": permutation_p(both)}


def with_holm(cells: dict) -> dict:
    """The cells with their Holm-adjusted p over the family."""
    for cell, adjusted in zip(cells, holm([c["p"] for c in cells.values()])):
        cells[cell]["holm"] = adjusted
    return cells


def sign_family(table: dict, pairs, measure) -> dict:
    """(A, B) -> sign_cell on one measure for the pairs both of whose arms ran; Holm over them."""
    return with_holm({(a, b): sign_cell(table, a, b, measure) for a, b in pairs if a in table and b in table})


def crossing_sign_family(table: dict) -> dict:
    """S1: (A, B, threshold) -> sign_cell of the crossing steps; Holm over all the cells."""
    return with_holm({(a, b, t): sign_cell(table, a, b, crossing_measure(t)) for a, b in CROSSING_FAMILY
                      if a in table and b in table for t in THRESHOLDS})


def direction(cell: dict) -> int:
    """-1: A significantly lower (Holm p < ALPHA, lower on more seeds), +1: higher, 0: not shown."""
    if cell["holm"] >= ALPHA or cell["lower"] == cell["higher"]:
        return 0
    return -1 if cell["lower"] > cell["higher"] else 1


def late_phase_verdict(cell: dict) -> str:
    """P and S4: held (A's late phase shorter), reversed (longer), not shown."""
    return {-1: "held", 1: "reversed", 0: "not shown"}[direction(cell)]


def noninferiority_verdict(cell: dict, margin: float = MARGIN) -> str:
    """S2: non-inferior when the one-sided Holm p < ALPHA; otherwise undecided when the 95% interval is wider
    than +-margin, else not shown non-inferior."""
    if cell["holm"] < ALPHA:
        return "non-inferior"
    if (cell["high"] - cell["low"]) / 2 > margin:
        return f"undecided (95% interval wider than +-{margin:g})"
    return "not shown non-inferior"


def two_sided_verdict(cell: dict) -> str:
    """S3: higher / lower (Holm p < ALPHA, by the mean difference's sign) / not shown."""
    if cell["holm"] >= ALPHA or cell["mean"] == 0:
        return "not shown"
    return "higher" if cell["mean"] > 0 else "lower"


def sign_row(label: str, cell: dict, verdict: str = "") -> list[str]:
    both = cell["observed_differences"]
    mean = f"{cell['mean']:+.1f} (n={len(both)}, p={cell['mean_p']:.3g})" if both else "- (n=0)"
    return [label, f"{cell['lower']}-{cell['higher']}-{cell['ties']}-{cell['undetermined']}", str(cell["censored"]),
            f"{cell['p']:.3g}", f"{cell['holm']:.3g}", mean, verdict]


SIGN_HEADER = ["A vs B", "lower-higher-tied-undetermined", "pairs censored", "sign-test p", "Holm",
               "mean A - B, both observed (n, permutation p)", "verdict"]


def print_sign_family(title: str, cells: dict, verdict) -> None:
    if not cells:
        print(f"\n{title}: not computed, an arm of its pairs has no runs")
        return
    print(f"\n{title}; paired by seed, A against B: seeds with A lower / higher / tied / undetermined; pairs with a"
          " censored run; exact two-sided sign test over the determined untied pairs, Holm-adjusted over the"
          f" family's {len(cells)} rows; the mean difference where both runs are observed, with its exact paired"
          " permutation p (reported, not tested)\n")
    markdown_table(SIGN_HEADER, [sign_row(cell_label(key), cell, verdict(cell)) for key, cell in cells.items()])


def cell_label(key: tuple) -> str:
    """(A, B) -> "A vs B"; (A, B, threshold) -> "A vs B >= t"; (A, B, name) -> "A vs B, name"."""
    a, b, *rest = key
    return f"{a} vs {b}" + "".join(f" >= {k:g}" if isinstance(k, float) else f", {k}" for k in rest)


def print_per_seed(table: dict, low: float = LATE[0], high: float = LATE[1]) -> None:
    """c(low), c(high) and L per method and seed; the runs without a late phase by name."""
    seeds = sorted({s for by_seed in table.values() for s in by_seed})
    print(f"\nPer seed: c({low:g}) / c({high:g}) / L (>=N: censored, never confirmed before the last confirmable"
          f" step; -: no late phase, c({low:g}) never confirmed)\n")
    rows = []
    for method, by_seed in table.items():
        cells = [" / ".join(str(x) if x else "-" for x in (c[low], c[high], late_phase(c[low], c[high])))
                 if (c := by_seed.get(s)) else "" for s in seeds]
        rows.append([method, *cells])
    markdown_table(["method", *(f"seed {s}" for s in seeds)], rows)
    never = [f"{m} seed {s}" for m, by_seed in table.items() for s, c in by_seed.items() if c[low].censored]
    print(f"\nRuns that never confirm {low:g} (no late phase): {', '.join(never) or 'none'}")


def print_final_family(title: str, cells: dict, verdict) -> None:
    if not cells:
        print(f"\n{title}: not computed, an arm of its pairs has no runs")
        return
    print(f"\n{title}; paired by seed, A - B: mean [95% Student t interval]; seeds with A above / below B; exact"
          f" paired permutation p, Holm-adjusted over the family's {len(cells)} rows\n")
    markdown_table(["A vs B", "difference", "seeds above / below", "p", "Holm", "verdict"], [
        [f"{a} vs {b}", f"{c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]",
         f"{sum(x > 0 for x in c['differences'])} / {sum(x < 0 for x in c['differences'])}",
         f"{c['p']:.3g}", f"{c['holm']:.3g}", verdict(c)] for (a, b), c in cells.items()])


def sensitivity(by_method: dict, pairs) -> dict:
    """(label, A, B) -> sign_cell of the other late-phase ends and crossing rules (reported, not tested)."""
    out = {}
    pairs = [(a, b) for a, b in pairs if a in by_method and b in by_method]
    table = observation_table(by_method)
    for low, high in OTHER_ENDS:
        for a, b in pairs:
            out[(f"L {low:g} -> {high:g}", a, b)] = sign_cell(table, a, b, late_measure(low, high))
    for window, hold in OTHER_RULES:
        other = observation_table(by_method, window, hold)
        for a, b in pairs:
            out[(f"L {LATE[0]:g} -> {LATE[1]:g}, WINDOW/HOLD {window}/{hold}", a, b)] = sign_cell(
                other, a, b, late_measure(*LATE))
    return out


def print_sensitivity(cells: dict) -> None:
    print("\nWhat another cut-off would show (pre-specified, reported, not tested, cannot change a verdict): seeds"
          " with A's late phase shorter / longer / tied / undetermined, the sign-test p without correction, and"
          " the per-seed values A, B\n")
    markdown_table(["cut-off", "A vs B", "shorter-longer-tied-undetermined", "p", "per seed (A, B)"], [
        [label, f"{a} vs {b}", f"{c['lower']}-{c['higher']}-{c['ties']}-{c['undetermined']}", f"{c['p']:.3g}",
         "; ".join(f"{s}: {x or '-'}, {y or '-'}" for s, (x, y) in c["values"].items())]
        for (label, a, b), c in cells.items()])


def print_length_dense_tables(by_method: dict) -> dict:
    """toy-length-dense's endpoints: P, S1-S4, the other cut-offs and the evaluations; returns the families."""
    steps = next(iter(by_method.values()))[0]["steps"]
    table = observation_table(by_method)
    print(f"\nLate phase L = c({LATE[1]:g}) - c({LATE[0]:g}) of the training length compliance; c(t): first"
          f" stable crossing (WINDOW {WINDOW}, HOLD {HOLD}); last confirmable step {last_confirmable(steps)}")
    print_per_seed(table)
    results = {"P": sign_family(table, PRIMARY_FAMILY, late_measure(*LATE)),
               "S4": sign_family(table, STATIC_FAMILY, late_measure(*LATE)),
               "S1": crossing_sign_family(table)}
    print_sign_family("P (primary), the late phase L", results["P"], late_phase_verdict)
    print_sign_family("S1, the first stable crossings c(t) (Figure 5), censoring-aware", results["S1"],
                      crossing_verdict)
    plain = {m: {r["seed"]: crossings(r) for r in runs} for m, runs in by_method.items()}
    results["S1 toy-budget form"] = crossing_family(by_method, plain, steps + 1)
    print_crossing_steps(plain, steps + 1)
    print_crossing_family(results["S1 toy-budget form"], "toy-budget's form, reported beside S1")
    evaluated = evaluated_steps(by_method)
    print_evaluations(by_method, [steps, *(s for s in evaluated if s == steps // 2)], steps)
    results["S2"] = final_family(by_method, ACCURACY_FAMILY, "Acc", MARGIN, steps)
    results["S3"] = final_family(by_method, JOINT_FAMILY, "Joint", None, steps)
    print_final_family(f"S2, Acc at step {steps}, non-inferiority by {MARGIN:g}: p one-sided against a mean"
                       f" difference of -{MARGIN:g} or less", results["S2"], noninferiority_verdict)
    print_final_family(f"S3, Joint at step {steps}: p two-sided", results["S3"], two_sided_verdict)
    print_sign_family("S4, dynamic against static weights on the late phase L", results["S4"], late_phase_verdict)
    results["sensitivity"] = sensitivity(by_method, (*PRIMARY_FAMILY, *STATIC_FAMILY))
    print_sensitivity(results["sensitivity"])
    print_verdict_lines(results)
    return results


def crossing_verdict(cell: dict) -> str:
    """S1: A's crossing sooner / later / not shown."""
    return {-1: "sooner", 1: "later", 0: "not shown"}[direction(cell)]


def ablation_verdict(cell: dict) -> str:
    """Family A: A's L (or crossing) shorter / longer than B's, or not shown."""
    return {-1: "shorter (sooner)", 1: "longer (later)", 0: "not shown"}[direction(cell)]


def print_verdict_lines(results: dict) -> None:
    print(f"\nPre-registered verdicts (alpha {ALPHA:g} after Holm within each family):")
    for (a, b), c in results["P"].items():
        print(f"- P, late phase, {a} vs {b}: {late_phase_verdict(c)} (shorter {c['lower']}, longer {c['higher']},"
              f" tied {c['ties']}, undetermined {c['undetermined']}; Holm p = {c['holm']:.3g})")
    for key, c in results["S1"].items():
        print(f"- S1, crossing, {cell_label(key)}: {crossing_verdict(c)} (Holm p = {c['holm']:.3g})")
    for family, verdict in (("S2", noninferiority_verdict), ("S3", two_sided_verdict)):
        for (a, b), c in results[family].items():
            print(f"- {family}, {a} vs {b}: {verdict(c)} ({c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}],"
                  f" Holm p = {c['holm']:.3g})")
    for (a, b), c in results["S4"].items():
        print(f"- S4, late phase, {a} vs {b}: {late_phase_verdict(c)} (Holm p = {c['holm']:.3g})")


def is_format_ablation(preset: str, runs: list[dict]) -> bool:
    """The ablation: toy-budget's runs without the format reward."""
    return preset == "toy-budget" and ABLATED_REWARD not in runs[0]["rewards"]


def ablation_family(by_method: dict) -> dict:
    """Family A: DARA-Asym against GDPO on L and on c(0.99), censoring-aware sign tests, Holm over the 2."""
    a, b = ABLATION_PAIR
    if a not in by_method or b not in by_method:
        return {}
    table = observation_table(by_method)
    return with_holm({(a, b, "L"): sign_cell(table, a, b, late_measure(*LATE)),
                      (a, b, f"c({LATE[1]:g})"): sign_cell(table, a, b, crossing_measure(LATE[1]))})


def with_format_runs(path: Path = WITH_FORMAT) -> dict | None:
    """toy-budget's committed runs of the ablation's arms (with format), by method; None when absent."""
    if not path.exists():
        return None
    runs = json.loads(path.read_text())["runs"]
    return {m: mine for m in ABLATION_PAIR if (mine := [r for r in runs if r["method"] == m])} or None


def print_ablation_tables(by_method: dict, with_format: dict | None) -> dict:
    """The format ablation's family A, its Acc non-inferiority and Joint (reported), and toy-budget's (with
    format) numbers beside them."""
    results = {}
    for name, runs in (("without format", by_method), ("with format (toy-budget)", with_format)):
        if runs is None:
            print(f"\n{name}: {WITH_FORMAT} does not exist; not shown")
            continue
        steps = next(iter(runs.values()))[0]["steps"]
        print(f"\nFormat ablation, {name}: last confirmable step {last_confirmable(steps)}")
        print_per_seed(observation_table(runs))
        family = ablation_family(runs)
        pair = (ABLATION_PAIR,)
        results[name] = {"A": family, "Acc": final_family(runs, pair, "Acc", MARGIN),
                         "Joint": final_family(runs, pair, "Joint")}
        role = "family A (the ablation's endpoint)" if runs is by_method else "reported beside, not tested"
        print_sign_family(f"{role}: L and c({LATE[1]:g}), {' vs '.join(ABLATION_PAIR)}", family, ablation_verdict)
        print_final_family(f"Acc at the last step, non-inferiority by {MARGIN:g} (reported)",
                           results[name]["Acc"], noninferiority_verdict)
        print_final_family("Joint at the last step, two-sided (reported)", results[name]["Joint"], two_sided_verdict)
    print(f"\nAblation verdicts (family A, alpha {ALPHA:g} after Holm over its 2):")
    for key, c in results.get("without format", {}).get("A", {}).items():
        print(f"- {cell_label(key)}: {ablation_verdict(c)} (lower {c['lower']}, higher {c['higher']}, tied"
              f" {c['ties']}, undetermined {c['undetermined']}; Holm p = {c['holm']:.3g})")
    return results
