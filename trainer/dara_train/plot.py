"""`dara-train plot`: PNG curves from metrics.jsonl.

One run: a panel each for the rewards' training means, their active-group
densities, the weight the op applied to each (a gap where the reward was
active in no group), each reward's share of the weighted advantage energy
(who drives the update: the quantity of the paper's Figures 7 and 8), and
with dynamic sampling its acceptance rate, conflict share and steps without
an update. Several runs: per label (what differs between their configs, seeds
aside), the median and interquartile band over runs of the reward means,
densities, applied weights and energy shares (the paper's Figure 1b view)."""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from .metrics import applied_weight, read_metrics

# Steps in a noisy series' trailing mean: short, so a trend shows without hiding a shift of a few steps.
SHARE_WINDOW = 10
# Config keys that tell runs of one method apart without making them another method.
NOT_A_LABEL = ("seed", "model.seed", "output_dir")


def training_records(records: list[dict], source) -> list[dict]:
    steps = [r for r in records if any(k.startswith("reward/") for k in r)]
    if not steps:
        raise ValueError(f"{source} has no training steps to plot")
    return steps


def reward_names(records: list[dict]) -> list[str]:
    return sorted({k.split("/")[1] for r in records for k in r if k.startswith("reward/")})


def number(value) -> float:
    return math.nan if value is None else float(value)


def applied(record: dict, name: str) -> float:
    """The logged applied weight; a run from before it was logged has the same rule applied to what it
    logged (density and the op's reported weight)."""
    key = f"applied_weight/{name}"
    if key in record:
        return number(record[key])
    density, weight = record.get(f"density/{name}"), record.get(f"weight/{name}")
    return math.nan if density is None or weight is None else number(applied_weight(density, weight))


def energy_share(record: dict, name: str, names: list[str]) -> float:
    """Reward `name`'s part of the step's summed weighted energy (NaN where nothing had energy)."""
    total = sum(number(record.get(f"weighted_energy/{n}")) for n in names)
    return number(record.get(f"weighted_energy/{name}")) / total if total > 0 else math.nan


def has_energy(records: list[dict]) -> bool:
    return any(k.startswith("weighted_energy/") for r in records for k in r)


def panels(records: list[dict]) -> list[tuple[str, object, bool]]:
    """Per panel of a run's rewards: its title, the value of one record for one reward name, and whether
    a run's panel draws the raw points under a trailing mean (a quantity that is noisy step to step)."""
    names = reward_names(records)
    rows = [("reward mean", lambda r, n: number(r.get(f"reward/{n}/mean")), False),
            ("active-group density", lambda r, n: number(r.get(f"density/{n}")), False),
            ("applied weight (gap: reward inactive)", applied, False)]
    if has_energy(records):
        rows.append(("share of weighted advantage energy", lambda r, n: energy_share(r, n, names), True))
    return rows


def trailing_mean(values: list[float], window: int) -> list[float]:
    """Mean of the finite values among the last `window` (NaN where there are none)."""
    out = []
    for i in range(len(values)):
        seen = [v for v in values[max(0, i - window + 1):i + 1] if math.isfinite(v)]
        out.append(sum(seen) / len(seen) if seen else math.nan)
    return out


def subplots(rows: int, columns: int, width: float, height: float):
    """A figure of rows x columns panels, each width x height inches. A bare Figure, not pyplot's: nothing
    keeps it once the caller drops it, and it needs no display."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * columns, height * rows), layout="constrained")
    return fig, fig.subplots(rows, columns, squeeze=False)


def grid(count: int, width: float, height: float):
    """`count` panels in two rows."""
    fig, axes = subplots(2, math.ceil(count / 2), width, height)
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def run_figure(records: list[dict]):
    """The one-run picture; each reward's series is a line with NaN where it has no value (a gap)."""
    names = reward_names(records)
    steps = [r["step"] for r in records]
    rows = panels(records)
    sampling = any("sampling/acceptance_rate" in r for r in records)
    fig, axes = grid(len(rows) + sampling, 5.5, 3.8)
    for (title, value, smoothed), ax in zip(rows, axes):
        for name in names:
            series = [value(r, name) for r in records]
            if smoothed:
                line, = ax.plot(steps, series, ".", ms=3, alpha=0.3)
                ax.plot(steps, trailing_mean(series, SHARE_WINDOW), color=line.get_color(), label=name)
            else:
                ax.plot(steps, series, marker=".", ms=3, label=name)
        if smoothed:
            title = f"{title}\n(points: each step; line: {SHARE_WINDOW}-step mean)"
        ax.set(title=title, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    if sampling:
        plot_sampling(axes[-1], records)
    return fig


def plot_run(output_dir: Path, path: Path) -> Path:
    fig = run_figure(training_records(read_metrics(output_dir), Path(output_dir) / "metrics.jsonl"))
    fig.savefig(path, dpi=110)
    return path


def plot_sampling(ax, records: list[dict]) -> None:
    steps = [r for r in records if "sampling/acceptance_rate" in r]
    x = [r["step"] for r in steps]
    ax.plot(x, [r["sampling/acceptance_rate"] for r in steps], label="acceptance rate")
    ax.plot(x, [r["sampling/conflict_groups"] / r["sampling/candidate_groups"] for r in steps],
            label="conflict groups / candidates")
    skipped = [r["step"] for r in steps if not r["sampling/updated"]]
    if skipped:
        ax.plot(skipped, [0] * len(skipped), "rx", label="no update")
    ax.set(title="dynamic sampling", xlabel="step", ylim=(-0.05, 1.05))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def quartiles(runs: list[list[dict]], value, name: str) -> tuple[list[int], list[tuple[float, float, float]]]:
    """Per step (over every step any run has), the 25th, 50th and 75th percentiles of the finite values of
    the runs that have one; NaN where none has."""
    import numpy as np

    steps = sorted({r["step"] for run in runs for r in run})
    at = {s: i for i, s in enumerate(steps)}
    table = np.full((len(runs), len(steps)), np.nan)
    for row, run in enumerate(runs):
        for record in run:
            table[row, at[record["step"]]] = value(record, name)
    out = []
    for column in table.T:
        finite = column[np.isfinite(column)]
        out.append(tuple(np.percentile(finite, (25, 50, 75))) if finite.size else (math.nan,) * 3)
    return steps, out


def runs_figure(runs: dict[str, list[list[dict]]], title: str):
    """Several runs: label -> each run's training records. One row per quantity, one column per reward;
    per label the median line and the interquartile band."""
    every = [r for group in runs.values() for run in group for r in run]
    names, rows = reward_names(every), panels(every)
    fig, axes = subplots(len(rows), len(names), 4.8, 3.3)
    for label, group in runs.items():
        for i, (quantity, value, _) in enumerate(rows):
            for j, name in enumerate(names):
                steps, q = quartiles(group, value, name)
                ax = axes[i][j]
                line, = ax.plot(steps, [m for _, m, _ in q], lw=1.2, label=f"{label} (n={len(group)})")
                ax.fill_between(steps, [lo for lo, _, _ in q], [hi for _, _, hi in q], color=line.get_color(),
                                alpha=0.15, lw=0)
                ax.set(title=f"{name}: {quantity}", xlabel="step")
                ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def plot_runs(runs: dict[str, list[list[dict]]], path: Path, title: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    runs_figure(runs, title).savefig(path, dpi=80)
    return path


def flat_config(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def run_labels(dirs: list[Path]) -> list[str]:
    """Each run's label: the config values that differ between the runs, seeds and output paths aside
    (advantage.method=dara reads `method=dara`)."""
    import yaml

    configs = []
    for run in dirs:
        if not (run / "config.yaml").exists():
            raise FileNotFoundError(f"{run} has metrics.jsonl but no config.yaml: its runs cannot be labelled")
        configs.append(flat_config(yaml.safe_load((run / "config.yaml").read_text())))
    keys = sorted({k for c in configs for k in c if k not in NOT_A_LABEL})
    differing = [k for k in keys if len({repr(c.get(k, "default")) for c in configs}) > 1]
    short = {k: k.removeprefix("advantage.").removeprefix("options.") for k in differing}
    return [", ".join(f"{short[k]}={c.get(k, 'default')}" for k in differing) or "all runs" for c in configs]


def find_runs(paths: list[Path]) -> list[Path]:
    """Each path is a run (holds metrics.jsonl) or a directory whose subdirectories hold runs."""
    runs = []
    for path in paths:
        found = [path] if (path / "metrics.jsonl").exists() else sorted(
            p for p in path.glob("*") if (p / "metrics.jsonl").exists())
        if not found:
            raise FileNotFoundError(f"{path}: no metrics.jsonl in it or in its subdirectories")
        runs += found
    return runs


def plot_main(argv) -> None:
    parser = argparse.ArgumentParser(prog="dara-train plot", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a run's OUTPUT_DIR, or a directory of runs; several runs are drawn as median and "
                             "interquartile band per label")
    parser.add_argument("--out", help="PNG path (default: curves.png in the one PATH given, or in the "
                                      "directory holding all of them)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.paths]
    dirs = find_runs(paths)
    default_dir = paths[0] if len(paths) == 1 else Path(os.path.commonpath([p.resolve() for p in paths]))
    out = Path(args.out) if args.out else default_dir / "curves.png"
    if len(dirs) == 1:
        print(plot_run(dirs[0], out))
        return
    runs = {}
    for run, label in zip(dirs, run_labels(dirs)):
        runs.setdefault(label, []).append(training_records(read_metrics(run), run / "metrics.jsonl"))
    print(plot_runs(runs, out, f"{len(dirs)} runs: median and interquartile range"))
