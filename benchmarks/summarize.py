"""Markdown summary of a microbench JSON: `python benchmarks/summarize.py results.json`.
benchmarks/RESULTS.md pastes this output."""
from __future__ import annotations

import argparse
import json

BASELINES = ("reference", "reference+compile", "trl-style", "verl-style")


def machine_line(data: dict) -> str:
    machine = data["machine"]
    return (f"Machine: {machine['processor']}, {machine['cpu_threads']} threads, torch {machine['torch']}, "
            f"triton {machine['triton']}, commit {machine['git_commit'][:10]}, "
            f"device {machine['device']}{' (' + machine['gpu'] + ')' if machine.get('gpu') else ''}. "
            f"Copy bandwidth {data['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s.\n")


def sweep_table(data: dict) -> None:
    backends = [b for b in dict.fromkeys(k for r in data["rows"] for k in r["seconds"]) if b not in BASELINES]
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


def targets_table(data: dict) -> None:
    print("| row | median | range | runs | target | met |")
    print("|---|---|---|---|---|---|")
    for r in data.get("targets", []):
        if "failed" in r:
            print(f"| {r['name']} | failed: {r['failed']} | | | | |")
            continue
        unit = {"x": "x", "MiB": " MiB", "s": " s"}[r["unit"]]
        print(f"| {r['name']} | {r['value']:.2f}{unit} | {r['low']:.2f}-{r['high']:.2f} | {len(r['runs'])} | "
              f"{r['target']} | {'yes' if r['met'] else '**no**'} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    args = parser.parse_args(argv)
    data = json.load(open(args.results))
    print(machine_line(data))
    if data["rows"]:
        sweep_table(data)
    if data.get("targets"):
        if data["rows"]:
            print()
        targets_table(data)


if __name__ == "__main__":
    main()
