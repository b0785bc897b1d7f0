"""`dara-train plot OUTPUT_DIR`: PNG curves from metrics.jsonl, one panel for
each reward's mean, one for each density and one for each weight (the
paper's Figure 1b view), and with dynamic sampling one of its acceptance
rate, conflict share and steps without an update."""
from __future__ import annotations

import argparse
from pathlib import Path

from .metrics import read_metrics


def plot_run(output_dir: Path, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in read_metrics(output_dir) if any(k.startswith("reward/") for k in r)]
    if not records:
        raise ValueError(f"{output_dir}/metrics.jsonl has no training steps to plot")
    names = sorted({k.split("/")[1] for r in records for k in r if k.startswith("reward/")})
    steps = [r["step"] for r in records]
    sampling = any("sampling/acceptance_rate" in r for r in records)
    fig, axes = plt.subplots(1, 4 if sampling else 3, figsize=(18.5 if sampling else 14, 4))
    for prefix, suffix, ax, title in (("reward/", "/mean", axes[0], "reward mean"),
                                      ("density/", "", axes[1], "active-group density"),
                                      ("weight/", "", axes[2], "weight")):
        for name in names:
            ax.plot(steps, [r.get(f"{prefix}{name}{suffix}") for r in records], label=name)
        ax.set(title=title, xlabel="step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    if sampling:
        plot_sampling(axes[3], records)
    fig.tight_layout()
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


def plot_main(argv) -> None:
    parser = argparse.ArgumentParser(prog="dara-train plot")
    parser.add_argument("output_dir")
    parser.add_argument("--out", help="PNG path (default OUTPUT_DIR/curves.png)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.output_dir) / "curves.png"
    print(plot_run(Path(args.output_dir), out))
