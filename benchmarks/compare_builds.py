"""The CPU calls users run, timed on two or more builds of the extension,
alternated, so that a shared machine's drift lands on every build alike.

Each build is a checkout with the extension built in place; make one per
commit with a git worktree:

    git worktree add ../before <commit> && (cd ../before && python setup.py build_ext --inplace)
    python benchmarks/compare_builds.py ../before . --rounds 5 --json compare.json

A checkout written PATH@cache=BYTES runs with set_token_cache_bytes(BYTES)
(PATH@cache=0: no token-output buffer kept), so one build can be timed
against itself with the cache off.

Every round runs each checkout once, in a child process that imports
dara_kernels from that checkout (PYTHONPATH) and times each case of
--cases (targets.py's shapes):

- contiguous, shuffled: `dara`, N = 2^20, K = 4, G = 16, group_size or a shuffled group_index;
- verl-int64, verl-bool: verl's token path, 256 x 16 responses, K = 3, T = 2,048, shuffled uids,
  `method="gdpo", preset="verl"`, an int64 or bool response_mask;
- paper: the paper's tool-calling batch, 512 x 4 responses, K = 3, T = 8,192, shuffled uids,
  `dara` with `preset="verl"` and a float32 mask.

The table gives each build's median of rounds and their range per case, and
its ratio to the first build (the median of the rounds' ratios, each round's
builds having run back to back, and their range). Each round also records
the 1-minute load average when the child started and the CPU the child's
timed calls got (CPU seconds per second over all its threads)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = ("contiguous", "shuffled", "verl-int64", "verl-bool", "paper")

CHILD = """
import json, os, sys, time
import torch
import dara_kernels as dk
sys.path.insert(0, sys.argv[1])
from targets import (HEADLINE_G, HEADLINE_K, HEADLINE_N, VERL_GROUP, VERL_K, VERL_PROMPTS, VERL_TOKENS, batch,
                     paper_batch, token_mask)

torch.set_num_threads(int(sys.argv[2]))
calls, cases, cache = int(sys.argv[3]), sys.argv[4].split(","), int(sys.argv[5])
assert dk.extension_available(), "the extension is not built in " + dk.__file__
if cache >= 0:
    dk.set_token_cache_bytes(cache)


def headline(shuffled):
    rewards, ids = batch(HEADLINE_N, HEADLINE_K, HEADLINE_G, shuffled)
    kwargs = {"group_index": ids} if shuffled else {"group_size": HEADLINE_G}
    return lambda: dk.fused_advantage(rewards, method="dara", backend="cpu", **kwargs)


def verl(dtype):
    n = VERL_PROMPTS * VERL_GROUP
    rewards, ids = batch(n, VERL_K, VERL_GROUP, shuffled=True, seed=1)
    mask = token_mask(n, VERL_TOKENS, dtype)
    return lambda: dk.fused_advantage(rewards, group_index=ids, method="gdpo", preset="verl", response_mask=mask,
                                      backend="cpu")


def paper():
    rewards, ids, mask = paper_batch()
    return lambda: dk.fused_advantage(rewards, group_index=ids, preset="verl", response_mask=mask, backend="cpu")


MAKE = {"contiguous": lambda: headline(False), "shuffled": lambda: headline(True),
        "verl-int64": lambda: verl(torch.int64), "verl-bool": lambda: verl(torch.bool), "paper": paper}
result = {"module": dk.__file__, "load": os.getloadavg()[0]}
for case in cases:
    call = MAKE[case]()
    for _ in range(5):
        call()
    times = []
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    result[case] = sorted(times)[len(times) // 2]
    result[case + " cpu"] = (time.process_time() - cpu) / (time.perf_counter() - wall)
print(json.dumps(result))
"""


def parse_checkout(spec: str) -> tuple[Path, int]:
    """PATH or PATH@cache=BYTES; -1: the build's default token cache."""
    path, _, cache = spec.partition("@cache=")
    return Path(path), int(cache) if cache else -1


def run_build(checkout: Path, cache: int, threads: int, calls: int, cases: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(HERE), str(threads), str(calls), ",".join(cases),
                          str(cache)], env=env, capture_output=True, text=True, cwd=checkout)
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
    parser.add_argument("checkouts", nargs="+", help="checkouts with the extension built in place (PATH[@cache=BYTES])")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=150, help="timed calls per case per run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", default="contiguous,shuffled", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--json", type=Path, help="write every run's medians here")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {', '.join(CASES)}")
    builds = [parse_checkout(spec) for spec in args.checkouts]
    # The directory too: worktrees of one commit with different patches have the same commit.
    names = [f"{path.resolve().name}@{commit_of(path)}{'' if cache < 0 else f'+cache={cache}'}"
             for path, cache in builds]
    if len(set(names)) < len(names):
        parser.error(f"two checkouts have the same name: {names}")
    runs = {name: [] for name in names}
    for r in range(args.rounds):
        for name, (checkout, cache) in zip(names, builds):
            result = run_build(checkout, cache, args.threads, args.calls, cases)
            runs[name].append(result)
            timed = ", ".join(f"{case} {result[case] * 1e3:.2f} ms (cpu {result[case + ' cpu']:.2f})"
                              for case in cases)
            print(f"round {r + 1}/{args.rounds} {name}: load {result['load']:.1f}, {timed}", flush=True)
    first = names[0]
    print(f"\n{args.threads} threads, {args.calls} calls per case per run, median per call\n")
    print(f"| case | build | median ms [range] | ratio to {first} [range] | cpu/s | load |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        for name in names:
            values = [run[case] * 1e3 for run in runs[name]]
            ratios = [run[case] / base[case] for run, base in zip(runs[name], runs[first])]
            cpu = statistics.median(run[case + " cpu"] for run in runs[name])
            load = statistics.median(run["load"] for run in runs[name])
            print(f"| {case} | {name} | {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}] | "
                  f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] | {cpu:.2f} | {load:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "calls": args.calls, "cases": cases, "runs": runs},
                                        indent=1))


if __name__ == "__main__":
    main()
