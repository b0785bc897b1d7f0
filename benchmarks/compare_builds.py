"""The headline CPU calls timed on two or more builds of the extension,
alternated, so that a shared machine's drift lands on every build alike.

Each build is a checkout with the extension built in place; make one per
commit with a git worktree:

    git worktree add ../before <commit> && (cd ../before && python setup.py build_ext --inplace)
    python benchmarks/compare_builds.py ../before . --rounds 3 --json compare.json

Every round runs each checkout once, in a child process that imports
dara_kernels from that checkout (PYTHONPATH) and times the calls of
targets.py's headline rows (N = 2^20, K = 4, G = 16, contiguous and shuffled).
The table gives each round's median per call and the change of each build's
median of rounds against the first build's."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, sys, time
import torch
import dara_kernels as dk
sys.path.insert(0, sys.argv[1])
from targets import HEADLINE_N, batch

torch.set_num_threads(int(sys.argv[2]))
calls = int(sys.argv[3])
assert dk.extension_available(), "the extension is not built in " + dk.__file__
result = {"module": dk.__file__}
for layout in ("contiguous", "shuffled"):
    rewards, ids = batch(HEADLINE_N, 4, 16, layout == "shuffled")
    kwargs = {"group_index": ids} if layout == "shuffled" else {"group_size": 16}
    for _ in range(5):
        dk.fused_advantage(rewards, method="dara", backend="cpu", **kwargs)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        dk.fused_advantage(rewards, method="dara", backend="cpu", **kwargs)
        times.append(time.perf_counter() - t0)
    result[layout] = sorted(times)[len(times) // 2]
print(json.dumps(result))
"""


def run_build(checkout: Path, threads: int, calls: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(HERE), str(threads), str(calls)], env=env,
                         capture_output=True, text=True, cwd=checkout)
    if out.returncode != 0:
        raise SystemExit(f"the run in {checkout} failed:\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["module"]).resolve().parent.parent != checkout.resolve():
        raise SystemExit(f"{checkout}: imported {result['module']}, not the checkout's own build")
    return result


def commit_of(checkout: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return out.stdout.strip() or str(checkout)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="+", type=Path, help="checkouts with the extension built in place")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=150, help="timed calls per layout per run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every run's medians here")
    args = parser.parse_args(argv)
    names = [f"{commit_of(c)} ({c})" for c in args.checkouts]
    runs = {name: [] for name in names}
    for r in range(args.rounds):
        for name, checkout in zip(names, args.checkouts):
            result = run_build(checkout, args.threads, args.calls)
            runs[name].append(result)
            print(f"round {r + 1}/{args.rounds} {name}: contiguous {result['contiguous'] * 1e3:.3f} ms, "
                  f"shuffled {result['shuffled'] * 1e3:.3f} ms", flush=True)
    first = names[0]
    print(f"\n{args.threads} threads, {args.calls} calls per run, median per call\n")
    print("| layout | build | runs (ms) | change vs " + first.split()[0] + " |")
    print("|---|---|---|---|")
    for layout in ("contiguous", "shuffled"):
        base = statistics.median(run[layout] for run in runs[first])
        for name in names:
            values = [run[layout] for run in runs[name]]
            change = statistics.median(values) / base - 1
            print(f"| {layout} | {name.split()[0]} | {', '.join(f'{v * 1e3:.2f}' for v in values)} | "
                  f"{change:+.0%} |")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "calls": args.calls, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
