"""Markdown summary of a microbench JSON: `python benchmarks/summarize.py results.json`.
benchmarks/RESULTS.md pastes this output."""
from __future__ import annotations

import json
import sys

BASELINES = ("reference", "reference+compile", "trl-style", "verl-style")


def main(path: str) -> None:
    data = json.load(open(path))
    machine = data["machine"]
    backends = [b for b in ("cpu", "cuda", "triton") if any(b in r["seconds"] for r in data["rows"])]
    print(f"Machine: {machine['processor']}, {machine['cpu_threads']} threads, torch {machine['torch']}, "
          f"triton {machine['triton']}, commit {machine['git_commit'][:10]}, "
          f"device {machine['device']}{' (' + machine['gpu'] + ')' if machine.get('gpu') else ''}. "
          f"Copy bandwidth {data['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s.\n")
    print("| N | K | G | method | layout | backend | ms | % of floor | floor x | "
          + " | ".join(f"x {b}" for b in BASELINES) + " |")
    print("|" + "---|" * (10 + len(BASELINES) - 1))
    for row in data["rows"]:
        for backend in backends:
            if backend not in row["seconds"]:
                continue
            s = row["seconds"][backend]
            ratios = " | ".join(f"{row['seconds'][b] / s:.1f}" if b in row["seconds"] else "-" for b in BASELINES)
            print(f"| {row['n']:,} | {row['k']} | {row['g']} | {row['method']} | {row['layout']} | {backend} | "
                  f"{s * 1e3:.3f} | {100 * row['floor_seconds'] / s:.1f} | {s / row['floor_seconds']:.1f} | "
                  f"{ratios} |")


if __name__ == "__main__":
    main(sys.argv[1])
