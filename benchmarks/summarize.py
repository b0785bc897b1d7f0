"""Markdown summary of a microbench JSON: `python benchmarks/summarize.py results.json`.
With `--before other.json` (the same command run on an earlier build) the
deployment rows print as a before/after table. benchmarks/RESULTS.md pastes
this output."""
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
    backends = [b for b in ("cpu", "cuda", "triton") if any(b in r["seconds"] for r in data["rows"])]
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


def shown(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def multiple(row: dict) -> str:
    return f"{row['floor_multiple']:.1f}" if row.get("floor_multiple") else "-"


def targets_table(data: dict, before: dict | None) -> None:
    earlier = {r["name"]: r for r in before.get("targets", [])} if before else {}
    if before:
        print("| row | before | after | floor | floor x before | floor x after | target | met after |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print("| row | time | floor | floor x | target | met |")
        print("|---|---|---|---|---|---|")
    for r in data.get("targets", []):
        floor = shown(r["floor_seconds"]) if r["floor_seconds"] else "-"
        note = f" ({r['speedup']:.0f}x verl's gdpo)" if "speedup" in r else ""
        met = ("yes" if r["met"] else "**no**") + note
        if before:
            b = earlier.get(r["name"])
            b_time = shown(b["seconds"]) if b else "-"
            b_note = f" ({b['speedup']:.0f}x)" if b and "speedup" in b else ""
            print(f"| {r['name']} | {b_time}{b_note} | {shown(r['seconds'])} | {floor} | "
                  f"{multiple(b) if b else '-'} | {multiple(r)} | {r['target']} | {met} |")
        else:
            print(f"| {r['name']} | {shown(r['seconds'])} | {floor} | {multiple(r)} | {r['target']} | {met} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--before", help="the same command's JSON from an earlier build")
    args = parser.parse_args(argv)
    data = json.load(open(args.results))
    before = json.load(open(args.before)) if args.before else None
    print(machine_line(data))
    if data["rows"]:
        sweep_table(data)
    if data.get("targets"):
        if data["rows"]:
            print()
        targets_table(data, before)


if __name__ == "__main__":
    main()
