"""Learning speed of advantage methods: dara-train runs of methods x seeds on
one task preset, then, per method, the steps each reward needs to reach its
threshold, the final held-out evaluation, and paired-by-seed comparisons.

    python benchmarks/learning_speed.py --preset toy-paper --seeds 10 [--other-seeds 5] [--first-seed 0] [--jobs 2]
        [--methods dara,dara-sym,gdpo,static-asym,static-sym,grpo] [--baselines] [--static-weights 1,5,1]
        [--group-sizes 4,8,16] [--steps N] [--set KEY=VALUE ...] [--json PATH] [--plot PNG] [--stability] [--run]
        [--thresholds format=0.9,...]

Methods are the paper's arms (Tables 2 and 4): `dara` is DARA-Asym (the op's
default: positive-only calibration, weights capped at 5), `dara-sym` DARA-Sym,
`static-asym` and `static-sym` the two calibrations with fixed weights
(`--static-weights`), and any other `fused_advantage` method by name (gdpo,
grpo, ...); `<method>-ds` is the method with dynamic sampling on any reward
(1.5 candidate groups per group trained on in the first round), `dara-zero`
DARA-Asym with `no_signal: zero` (the arms of issue 27). `--stability` adds
the runs whose format mean drops after reaching its threshold, the
generation cost per step and up to the format threshold, dynamic sampling's
counts, the paired area under the format curve (the endpoint fixed in
benchmarks/LEARNING.md) with its permutation p, the paired held-out accuracy
differences, and for comparisons with dynamic sampling the same area per
response generated. The seeds are `--first-seed` onwards.
`--group-sizes` runs each method at every group size G with the preset's
replies per step (prompts = replies / G); at the preset's own G the runs are
the plain methods' runs, so they are shared with the main table.

By default the command only reads the results file (benchmarks/results/
learning-<preset>.json unless --json names another) and prints its tables; a
run it asks for that the file lacks, or holds with other settings, is an error
that names them. `--run` trains those runs and writes the file: runs are
single-threaded processes, `--jobs` at a time, and every finished run is
written at once, so an interrupted benchmark resumes where it stopped (same
command), and runs already in the file are reused by any command that asks for
them. Each run records the commit it was made at (`+changes` when the
trainer's or the op's sources differed from it). `--plot` writes its PNG only
to the path it is given. A run that never
reaches a threshold counts as one step slower than the run length (it is
listed as not reached)."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired_tests import mean_difference, permutation_p, sign_test_p  # noqa: E402
from tables import markdown_table, spread  # noqa: E402

MAIN_METHODS = ["dara", "dara-sym", "gdpo", "static-asym", "static-sym", "grpo"]
TABLE5_BASELINES = ["dvao", "saw", "sa_mrpo", "gd2po_hard"]
# Group-signal arms: dynamic sampling on any reward (docs/trainer.md), or DARA-Asym with no_signal="zero".
SIGNAL_ARMS = ["gdpo-ds", "dara-ds", "dara-zero"]
# Methods run with --seeds; every other one with --other-seeds.
FULLY_SEEDED = ("dara", "dara-sym", "gdpo", *SIGNAL_ARMS)
# Dynamic sampling draws candidate groups to accepted ones as the paper's math runs (2 : 3, its Table 9).
CANDIDATES_PER_ACCEPTED = 1.5
# The paper's static controls (Table 4) put weight 5 on one reward: here the one that starts sparse.
DEFAULT_STATIC_WEIGHTS = {"toy": "1,5,1", "toy-paper": "1,5,1", "toy-shift": "1,5,1", "toy-gated-length": "1,1,5",
                          "toy-budget": "1,1,5", "toy-length-dense": "1,5"}
# toy-budget's pre-registered arms (benchmarks/LEARNING.md), all with --seeds, and its endpoints
# (budget_endpoints.py) printed after the tables; the same arms on toy-length-dense, its task in the paper's regime,
# whose endpoints (the late phase) and the format ablation's (toy-budget without format) are late_phase.py's.
BUDGET_PRESET = "toy-budget"
LENGTH_DENSE_PRESET = "toy-length-dense"
BUDGET_PRESETS = (BUDGET_PRESET, LENGTH_DENSE_PRESET)
BUDGET_METHODS = ["gdpo", "dara", "dara-sym", "static-asym", "static-sym"]
# Paired comparisons: each reference method against these (None: every other method at the same group size).
PAIRED = {"dara": None, "dara-sym": ("gdpo", "static-sym"), "gdpo-ds": ("gdpo",)}
KEPT = ("reward/", "density/", "weight/", "weighted_energy/", "eval/", "eval_sampled/", "sampling/", "pretrain/")


def advantage_overrides(name: str, static_weights: str, prompts: int) -> list[str]:
    """dara-train overrides of one named method (the calibrations through advantage.options; `prompts`:
    the groups trained on per step)."""
    named = {
        "dara-sym": ("dara", "{calibration: symmetric}"),
        "static-asym": ("static", f"{{calibration: positive, reward_weights: [{static_weights}]}}"),
        "static-sym": ("static", f"{{reward_weights: [{static_weights}]}}"),
        "dara-zero": ("dara", "{no_signal: zero}"),
    }
    if name.endswith("-ds"):
        return [*advantage_overrides(name[:-3], static_weights, prompts), "rollout.dynamic_sampling=any",
                f"rollout.candidate_groups={math.ceil(prompts * CANDIDATES_PER_ACCEPTED)}"]
    if name in named:
        method, options = named[name]
        return [f"advantage.method={method}", f"advantage.options={options}"]
    return [f"advantage.method={name}"]


def method_specs(names: list[str], static_weights: str, group_sizes: list[int], preset_group: int,
                 replies: int) -> dict[str, list[str]]:
    """label -> dara-train overrides; `name@G<g>` for a group size other than the preset's."""
    specs = {}
    for group in group_sizes or [preset_group]:
        if replies % group:
            raise SystemExit(f"--group-sizes: {replies} replies per step do not split into groups of {group}")
        for name in names:
            if group == preset_group:
                specs[name] = advantage_overrides(name, static_weights, replies // group)
            else:
                specs[f"{name}@G{group}"] = [*advantage_overrides(name, static_weights, replies // group),
                                             f"rollout.group_size={group}",
                                             f"rollout.prompts_per_step={replies // group}"]
    return specs


def base_method(label: str) -> str:
    return label.split("@")[0]


def group_suffix(label: str) -> str:
    return label[len(base_method(label)):]


def run_one(preset: str, label: str, overrides: list[str], seed: int, steps: int | None, workdir: str,
            settings: list[str]) -> dict:
    """One training run in this (worker) process, single-threaded; returns its compact metrics."""
    import torch

    torch.set_num_threads(1)
    # Each run makes its own one-rank process group on a fresh port.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(key, None)
    import torch.distributed as dist

    from dara_train.config import load_config
    from dara_train.metrics import read_metrics
    from dara_train.train import Trainer

    out = Path(workdir) / f"{label}-seed{seed}"
    shutil.rmtree(out, ignore_errors=True)
    assignments = [*settings, f"seed={seed}", f"output_dir={out}", "report=false", *overrides]
    if steps:
        assignments.append(f"steps={steps}")
    cfg = load_config(preset, None, assignments)
    start = time.perf_counter()
    out.mkdir(parents=True)
    with open(out / "log.txt", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        trainer = Trainer(cfg)
        try:
            trainer.run()
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    records = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                if k == "step" or k.startswith(KEPT)} for r in read_metrics(out)]
    shutil.rmtree(out, ignore_errors=True)
    return {"method": label, "seed": seed, "overrides": overrides, "seconds": time.perf_counter() - start,
            "steps": cfg.steps, "rewards": cfg.task.rewards, "thresholds": cfg.task.thresholds,
            "start": cfg.task.shift_step, "records": records}


EXPERIMENT_FLAGS = {"preset": "--preset", "steps_override": "--steps", "settings": "--set"}


def load_results(path: Path, preset: str, steps: int | None, settings: list[str], run: bool) -> dict:
    """The results file's experiment; without `run`, a missing file or another experiment is an error."""
    experiment = {"preset": preset, "steps_override": steps, "settings": settings}
    if not path.exists():
        if not run:
            raise SystemExit(f"{path} does not exist: pass --run to train its runs and write it")
        return {**experiment, "runs": []}
    data = json.loads(path.read_text())
    data.setdefault("settings", [])
    differ = [f"{flag} {data.get(key)!r} there, {experiment[key]!r} asked" for key, flag in EXPERIMENT_FLAGS.items()
              if data.get(key) != experiment[key]]
    if not differ:
        return data
    message = f"{path} holds another experiment ({'; '.join(differ)})"
    if not run:
        raise SystemExit(f"{message}: pass --run to train this one in its place, or --json another file")
    print(f"{message}; starting over", file=sys.stderr)
    return {**experiment, "runs": []}


def save_results(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def seed_count(args, label: str) -> int:
    fully = base_method(label) in FULLY_SEEDED or args.preset in BUDGET_PRESETS
    return args.seeds if fully else min(args.other_seeds, args.seeds)


def seeds_of(args, label: str) -> range:
    return range(args.first_seed, args.first_seed + seed_count(args, label))


def wanted_runs(args, specs: dict) -> list[tuple[str, int]]:
    """(label, seed) of every run the command asks for."""
    return [(label, seed) for seed in range(args.first_seed, args.first_seed + args.seeds) for label in specs
            if seed in seeds_of(args, label)]


def name_runs(runs: list[tuple[str, int]]) -> str:
    """`dara seeds 2, 3; gdpo seed 0`."""
    seeds = {}
    for label, seed in runs:
        seeds.setdefault(label, []).append(seed)
    return "; ".join(f"{label} seed{'s' if len(s) > 1 else ''} {', '.join(map(str, sorted(s)))}"
                     for label, s in seeds.items())


def stale_runs(data: dict, specs: dict) -> list[dict]:
    """Runs of an asked-for method made with other overrides than the method's current ones."""
    return [r for r in data["runs"] if r["method"] in specs and r["overrides"] != specs[r["method"]]]


def check_complete(args, specs: dict, data: dict, path: Path) -> None:
    """Without --run: every run asked for must be in the file, made with its method's current overrides."""
    wanted = wanted_runs(args, specs)
    made = {(r["method"], r["seed"]) for r in data["runs"]}
    stale = {(r["method"], r["seed"]) for r in stale_runs(data, specs)}
    problems = [f"{what}: {name_runs(runs)}" for what, runs in (
        ("not in it", [run for run in wanted if run not in made]),
        ("made with other overrides for their method", [run for run in wanted if run in stale])) if runs]
    if problems:
        raise SystemExit(f"{path} lacks runs this command asks for ({'; '.join(problems)}): "
                         f"pass --run to train them (it rewrites {path})")


# What a run depends on: a run made with any of these changed since the commit is marked so.
SOURCES = ("trainer", "dara_kernels", "csrc", "benchmarks/learning_speed.py", "setup.py", "pyproject.toml")


def source_commit() -> str:
    """The commit the runs are made at (HEAD), with `+changes` when the trainer's or the op's sources differ
    from it."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
    changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *SOURCES], cwd=root).returncode
    return head.stdout.strip() + ("+changes" if changed else "")


def run_all(args, specs: dict, data: dict, path: Path) -> None:
    done = {(r["method"], r["seed"]) for r in data["runs"]}
    todo = [run for run in wanted_runs(args, specs) if run not in done]
    total = len(done) + len(todo)
    if not todo:
        print(f"all {total} runs are already in {path}", file=sys.stderr)
        return
    jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(todo)))
    print(f"{len(todo)} runs to do ({len(done)} already in {path}), {jobs} at a time", file=sys.stderr)
    commit = source_commit()
    workdir = tempfile.mkdtemp(prefix="learning-speed-")
    started = time.perf_counter()
    try:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(run_one, args.preset, label, specs[label], seed, args.steps, workdir,
                                   args.settings) for label, seed in todo]
            for finished, future in enumerate(as_completed(futures), 1):
                run = {**future.result(), "commit": commit}
                data["runs"].append(run)
                save_results(path, data)
                eta = (time.perf_counter() - started) / finished * (len(todo) - finished)
                print(f"[{len(done) + finished}/{total}] {run['method']} seed {run['seed']}: "
                      f"{run['seconds']:.0f}s, about {eta / 60:.1f} min left", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    import numpy as np

    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return float(q1), float(q2), float(q3)


def run_steps(run: dict) -> dict:
    """reward (and `all`) -> steps to threshold; never reached -> run length - start + 1."""
    from dara_train.summary import first_joint_step, steps_to_threshold, thresholds_for

    thresholds = thresholds_for(run["rewards"], run["thresholds"])
    never = run["steps"] - run["start"] + 1
    steps = {name: steps_to_threshold(run["records"], name, thresholds[name], run["start"])
             for name in run["rewards"]}
    joint = first_joint_step(steps)
    out = {name: (s if s is not None else never) for name, s in steps.items()}
    out["all"] = joint if joint is not None else never
    return out


COLLAPSE_STEPS = 10


def collapsed(run: dict) -> bool:
    """Whether the policy went deterministic: no reward varied in any group for
    COLLAPSE_STEPS consecutive steps (every density 0), so no step could learn."""
    streak = 0
    for record in run["records"]:
        densities = [record.get(f"density/{name}") for name in run["rewards"]]
        if None in densities:
            continue
        streak = streak + 1 if not any(densities) else 0
        if streak >= COLLAPSE_STEPS:
            return True
    return False


def final_eval(run: dict) -> dict:
    evals = [r for r in run["records"] if any(k.startswith("eval/") for k in r)]
    return {k[5:]: v for k, v in evals[-1].items() if k.startswith("eval/")} if evals else {}


FINAL_TRAIN_STEPS = 10


def first_density(run: dict) -> dict:
    """Each reward's active-group density at the first step (after the shift for toy-shift)."""
    record = next(r for r in run["records"] if r["step"] > run["start"] and f"density/{run['rewards'][0]}" in r)
    return {name: record[f"density/{name}"] for name in run["rewards"]}


def final_train(run: dict) -> dict:
    """Each reward's training mean over the last FINAL_TRAIN_STEPS steps (sampled replies: finer than the
    held-out greedy eval of 20 prompts)."""
    records = [r for r in run["records"] if f"reward/{run['rewards'][0]}/mean" in r][-FINAL_TRAIN_STEPS:]
    return {name: sum(r[f"reward/{name}/mean"] for r in records) / len(records) for name in run["rewards"]}


def pairs(methods: list[str]) -> list[tuple[str, str]]:
    """(reference, other) pairs among the methods, each within one group size."""
    out = []
    for reference, others in PAIRED.items():
        for ref in (m for m in methods if base_method(m) == reference):
            suffix = group_suffix(ref)
            out += [(ref, m) for m in methods if m != ref and group_suffix(m) == suffix
                    and (others is None or base_method(m) in others)]
    return out


def compare(mine: dict, other: dict) -> dict:
    """Paired by seed: wins (mine faster), losses, ties, sign-test p, and the per-seed step ratio mine/other."""
    seeds = sorted(set(mine) & set(other))
    wins = sum(mine[s] < other[s] for s in seeds)
    losses = sum(mine[s] > other[s] for s in seeds)
    ratios = [mine[s] / other[s] for s in seeds]
    return {"wins": wins, "losses": losses, "ties": len(seeds) - wins - losses, "p": sign_test_p(wins, losses),
            "ratio": quartiles(ratios), "quarter_fewer": sum(r <= 0.75 for r in ratios), "seeds": len(seeds)}


def summarize_methods(data: dict) -> dict:
    """{"methods": method -> {seeds, collapsed, steps: reward -> {median, q1, q3, reached, by_seed},
    eval: reward -> mean, train: reward -> mean}, "pairs": (reference, other) -> reward -> compare()}."""
    runs = sorted(data["runs"], key=lambda r: r["seed"])
    rewards = runs[0]["rewards"] + ["all"]
    never = runs[0]["steps"] - runs[0]["start"] + 1
    methods = list(dict.fromkeys(r["method"] for r in data["runs"]))
    table = {}
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        steps = [run_steps(r) for r in mine]
        evals = [final_eval(r) for r in mine]
        trains = [final_train(r) for r in mine]
        firsts = [first_density(r) for r in mine]
        entry = {"seeds": [r["seed"] for r in mine], "collapsed": sum(map(collapsed, mine)),
                 "steps": {}, "eval": {}, "train": {},
                 "first_density": {name: (sum(f[name] for f in firsts) / len(firsts), max(f[name] for f in firsts))
                                   for name in runs[0]["rewards"]}}
        for name in rewards:
            values = [s[name] for s in steps]
            q1, q2, q3 = quartiles(values)
            entry["steps"][name] = {"median": q2, "q1": q1, "q3": q3,
                                    "reached": sum(v < never for v in values),
                                    "by_seed": dict(zip(entry["seeds"], values))}
        for name in runs[0]["rewards"]:
            values = [e[name] for e in evals if name in e]
            entry["eval"][name] = sum(values) / len(values) if values else float("nan")
            entry["train"][name] = sum(t[name] for t in trains) / len(trains)
        table[method] = entry
    paired = {(a, b): {name: compare(table[a]["steps"][name]["by_seed"], table[b]["steps"][name]["by_seed"])
                       for name in rewards} for a, b in pairs(methods)}
    return {"methods": table, "pairs": paired}


def print_tables(data: dict, summary: dict) -> None:
    run = data["runs"][0]
    from dara_train.summary import thresholds_for

    thresholds = thresholds_for(run["rewards"], run["thresholds"])
    rewards = run["rewards"] + ["all"]
    never = run["steps"] - run["start"] + 1
    after = f" after step {run['start']}" if run["start"] else ""
    settings = "".join(f", --set {s}" for s in data.get("settings", []))
    print(f"\npreset {data['preset']}{settings}, {run['steps']} steps; steps{after} until the 5-step training "
          "mean reaches " + ", ".join(f"{k} >= {v:g}" for k, v in thresholds.items()) + " (all: every reward);"
          f" median [IQR], (reached/runs); never reached counts as {never}; collapsed: runs in which every"
          f" density stayed 0 for {COLLAPSE_STEPS}+ steps; final eval: held-out greedy, mean over seeds;"
          f" final train: training mean of the last {FINAL_TRAIN_STEPS} steps, mean over seeds; density at"
          f" step {run['start'] + 1}: share of groups in which the reward varies, mean [max] over seeds, "
          + " / ".join(run["rewards"]) + "\n")
    rows = []
    for method, entry in summary["methods"].items():
        cells = [f"{e['median']:.1f} [{e['q1']:.0f}-{e['q3']:.0f}] ({e['reached']}/{len(entry['seeds'])})"
                 for e in (entry["steps"][n] for n in rewards)]
        density = " / ".join(f"{mean:.3f} [{top:.3f}]" for mean, top in entry["first_density"].values())
        rows.append([method, str(len(entry["seeds"])), str(entry["collapsed"]), density, *cells,
                     *(f"{entry['eval'][n]:.2f}" for n in run["rewards"]),
                     *(f"{entry['train'][n]:.2f}" for n in run["rewards"])])
    markdown_table(["method", "seeds", "collapsed", f"density at step {run['start'] + 1}",
                    *(f"steps: {n}" for n in rewards),
                    *(f"final eval {n}" for n in run["rewards"]), *(f"final train {n}" for n in run["rewards"])],
                   rows)
    if not summary["pairs"]:
        return
    print("\nPaired by seed, A against B: wins-losses-ties of A being faster, exact two-sided sign-test p\n")
    markdown_table(["A vs B", *rewards], [
        [f"{a} vs {b}", *(f"{c['wins']}-{c['losses']}-{c['ties']} (p={c['p']:.3g})"
                          for c in (cells[n] for n in rewards))]
        for (a, b), cells in summary["pairs"].items()])
    print("\nPaired by seed, A's steps / B's steps: median [IQR]; seeds in which A needs at least 25% fewer steps\n")
    markdown_table(["A vs B", *rewards], [
        [f"{a} vs {b}", *(f"{c['ratio'][1]:.2f} [{c['ratio'][0]:.2f}-{c['ratio'][2]:.2f}];"
                          f" {c['quarter_fewer']}/{c['seeds']}" for c in (cells[n] for n in rewards))]
        for (a, b), cells in summary["pairs"].items()])


DROP = 0.5
DROP_REWARD = "format"
# The endpoint fixed before the group-signal runs (LEARNING.md): DARA against GDPO, without and with dynamic
# sampling, the area under the training format curve over steps 1-150; the other cut-offs only beside it.
ENDPOINT_PAIRS = (("dara", "gdpo"), ("dara-ds", "gdpo-ds"))
SECONDARY_PAIRS = (("dara-zero", "gdpo"), ("dara-zero", "dara"), ("dara-ds", "dara"), ("gdpo-ds", "gdpo"))
AREA_CUTOFFS = (150, 100, 50)
BOOTSTRAP = 10_000


def reward_series(run: dict, reward: str) -> list[tuple[int, float]]:
    key = f"reward/{reward}/mean"
    return [(r["step"], r[key]) for r in run["records"] if r.get(key) is not None]


def drop_step(run: dict, reward: str = DROP_REWARD) -> int | None:
    """The first step at which the reward's training mean falls by more than DROP from the step before, once
    it has been at its threshold (None: never)."""
    from dara_train.summary import thresholds_for

    threshold = thresholds_for(run["rewards"], run["thresholds"])[reward]
    reached = False
    series = reward_series(run, reward)
    for (_, before), (step, value) in zip(series, series[1:]):
        reached = reached or before >= threshold
        if reached and before - value > DROP:
            return step
    return None


def area(run: dict, last: int, reward: str = DROP_REWARD) -> float:
    """Mean of the reward's training mean over steps 1..last: the area under its curve, between 0 and 1."""
    values = [v for step, v in reward_series(run, reward) if 1 <= step <= last]
    if len(values) != last:
        raise SystemExit(f"{run['method']} seed {run['seed']} has {len(values)} of steps 1-{last}")
    return sum(values) / last


def response_area(run: dict, budget: int, default: int, reward: str = DROP_REWARD) -> float:
    """Mean of the reward over the run's first `budget` responses generated, each step's mean standing for its
    responses (`default` per step in runs without dynamic sampling): the area per response."""
    left, total = budget, 0.0
    for record in run["records"]:
        if record["step"] >= 1 and record.get(f"reward/{reward}/mean") is not None and left > 0:
            used = min(left, record.get("sampling/responses", default))
            total += used * record[f"reward/{reward}/mean"]
            left -= used
    if left:
        raise SystemExit(f"{run['method']} seed {run['seed']} generated {budget - left} of {budget} responses")
    return total / budget


def responses_to_threshold(run: dict, default: int, reward: str = DROP_REWARD) -> float | None:
    """Responses generated up to the step at which the reward's 5-step mean first reaches its threshold
    (None: never)."""
    step = run_steps(run)[reward]
    if step > run["steps"] - run["start"]:
        return None
    return sum(r.get("sampling/responses", default) for r in run["records"]
               if 1 <= r["step"] <= step and any(k.startswith("reward/") for k in r))


def paired_ratio(mine: list[dict], other: list[dict], measure) -> dict:
    """Per seed measure(mine) / measure(other); their geometric mean with a percentile bootstrap 95% CI over
    seeds, and the exact paired permutation p of the log ratios."""
    import numpy as np

    theirs = {r["seed"]: measure(r) for r in other}
    seeds = sorted({r["seed"] for r in mine} & set(theirs))
    ratios = np.array([measure(r) / theirs[r["seed"]] for r in mine if r["seed"] in theirs])
    logs = np.log(ratios)
    means = logs[np.random.default_rng(0).integers(0, len(logs), (BOOTSTRAP, len(logs)))].mean(1)
    low, high = np.exp(np.percentile(means, [2.5, 97.5]))
    return {"seeds": seeds, "ratios": ratios.tolist(), "ratio": float(np.exp(logs.mean())), "low": float(low),
            "high": float(high), "above": int((ratios > 1).sum()), "p": permutation_p(logs.tolist())}


def responses_per_step(run: dict, default: int) -> float:
    """Mean responses generated per step (runs made before dynamic sampling generated `default` each)."""
    values = [r.get("sampling/responses", default) for r in run["records"] if r["step"] >= 1
              and any(k.startswith("reward/") for k in r)]
    return sum(values) / len(values)


def print_stability(data: dict, default_responses: int) -> None:
    """Per method: the runs whose format mean drops after reaching its threshold, steps to it, held-out
    correct, generation cost and dynamic sampling's counts; then the paired area endpoint."""
    from dara_train.summary import thresholds_for

    run = data["runs"][0]
    threshold = thresholds_for(run["rewards"], run["thresholds"])[DROP_REWARD]
    never = run["steps"] - run["start"] + 1
    methods = list(dict.fromkeys(r["method"] for r in data["runs"]))
    by_method = {m: [r for r in data["runs"] if r["method"] == m] for m in methods}
    print(f"\nDrops: runs in which the training {DROP_REWARD} mean falls by more than {DROP} in one step after"
          f" first reaching {threshold:g} (the step in brackets). Each other cell: median [min-max] over the runs;"
          f" steps to {DROP_REWARD} {threshold:g} as above (never: {never}), and the responses generated up to"
          " that step (never: the runs that never reach it are left out, their count in brackets); held-out"
          " correct (greedy) at the last evaluation; responses generated per step (mean over the run's steps);"
          " steps without a policy update"
          " (dynamic sampling found no informative group), summed over the runs; acceptance rate (mean over the"
          " run's steps); groups per step whose rewards vary while their sum is constant, among the candidates"
          " (mean over the run's steps).\n")
    rows = []
    for method, runs in by_method.items():
        drops = [(r["seed"], drop_step(r)) for r in runs]
        dropped = [f"{seed} ({step})" for seed, step in drops if step is not None]
        steps = [run_steps(r)[DROP_REWARD] for r in runs]
        correct = [final_eval(r).get("correct", float("nan")) for r in runs]
        responses = [responses_per_step(r, default_responses) for r in runs]
        to_threshold = [responses_to_threshold(r, default_responses) for r in runs]
        reached = [n for n in to_threshold if n is not None]
        never_reached = f" ({len(runs) - len(reached)} never)" if len(reached) < len(runs) else ""
        sampled = [[rec for rec in r["records"] if "sampling/rounds" in rec] for r in runs]
        skipped = sum(rec["sampling/updated"] == 0 for recs in sampled for rec in recs)
        acceptance = [sum(rec["sampling/acceptance_rate"] for rec in recs) / len(recs) for recs in sampled
                      if recs and "sampling/acceptance_rate" in recs[0]]
        conflicts = [sum(rec["sampling/conflict_groups"] for rec in recs) / len(recs) for recs in sampled if recs]
        seeds = f": seed{'s' if len(dropped) > 1 else ''} {', '.join(dropped)}" if dropped else ""
        rows.append([method, str(len(runs)), f"{len(dropped)}{seeds}",
                     spread(steps, 1), (spread(reached, 0) if reached else "-") + never_reached,
                     spread(correct), spread(responses, 0),
                     str(skipped) if all(sampled) else "-", spread(acceptance) if acceptance else "-",
                     spread(conflicts) if conflicts else "-"])
    markdown_table(["method", "runs", "drops", f"steps: {DROP_REWARD}", f"responses: {DROP_REWARD}",
                    "held-out correct", "responses per step",
                    "steps without update", "acceptance rate", "conflict groups per step"], rows)
    for title, pairs_ in (("Endpoint (benchmarks/LEARNING.md says which runs it was fixed before)", ENDPOINT_PAIRS),
                          ("Secondary comparisons (not the endpoint)", SECONDARY_PAIRS)):
        present = [(a, b) for a, b in pairs_ if a in by_method and b in by_method]
        if not present:
            continue
        print(f"\n{title}: area under the training {DROP_REWARD} curve over steps 1-N (mean of the per-step"
              f" means), paired by seed, A / B: geometric mean of the per-seed ratios [95% percentile bootstrap CI,"
              f" {BOOTSTRAP} resamples of the seeds]; seeds with A above B; p: exact two-sided paired permutation"
              " test of the log ratios\n")
        print_area_table(by_method, present, {f"steps 1-{last}": (lambda r, last=last: area(r, last))
                                              for last in AREA_CUTOFFS})
        print_accuracy_differences(by_method, present)
        sampled_pairs = [(a, b) for a, b in present if a.endswith("-ds") or b.endswith("-ds")]
        if sampled_pairs:
            budgets = {f"first {last * default_responses:,} responses":
                       (lambda r, n=last * default_responses: response_area(r, n, default_responses))
                       for last in AREA_CUTOFFS}
            print(f"\nThe same per response generated: the {DROP_REWARD} mean over each run's first N responses"
                  f" (each step's mean standing for its responses; {default_responses} per step without dynamic"
                  " sampling, so the first column is a whole run without it)\n")
            print_area_table(by_method, sampled_pairs, budgets)


def print_accuracy_differences(by_method: dict, pairs_: list[tuple[str, str]]) -> None:
    """Held-out correct at the last evaluation, paired A - B: greedy, and sampled where the runs have it."""
    kinds = [("greedy", "eval/correct"), ("sampled", "eval_sampled/correct")]
    last = {m: {r["seed"]: [rec for rec in r["records"] if "eval/correct" in rec][-1] for r in runs}
            for m, runs in by_method.items()}
    kinds = [(name, key) for name, key in kinds if all(key in rec for recs in last.values() for rec in recs.values())]
    counts = next(iter(next(iter(last.values())).values()))
    sizes = [f"{name}: {counts[prefix + '/replies']} replies on {counts[prefix + '/prompts']} prompts per run"
             for name, key in kinds if (prefix := key.split("/")[0]) + "/replies" in counts]
    print("\nHeld-out correct at the last evaluation, paired by seed, A - B: mean [95% Student t interval]; seeds"
          " with A above / below B; exact two-sided paired permutation p" + "".join(f"; {s}" for s in sizes) + "\n")
    rows = []
    for a, b in pairs_:
        cells = []
        for _, key in kinds:
            d = [last[a][seed][key] - last[b][seed][key] for seed in sorted(last[a]) if seed in last[b]]
            ci = mean_difference(d)
            cells.append(f"{ci['mean']:+.3f} [{ci['low']:+.3f}, {ci['high']:+.3f}]; {sum(x > 0 for x in d)} /"
                         f" {sum(x < 0 for x in d)}; p={permutation_p(d):.3g}")
        rows.append([f"{a} vs {b}", *cells])
    markdown_table(["A vs B", *(name for name, _ in kinds)], rows)


def print_area_table(by_method: dict, pairs_: list[tuple[str, str]], measures: dict) -> None:
    """One row per pair, one column per measure: the paired ratio, its CI, seeds above, p; then the first
    measure's per-seed ratios."""
    cells = {pair: {name: paired_ratio(by_method[pair[0]], by_method[pair[1]], measure)
                    for name, measure in measures.items()} for pair in pairs_}
    markdown_table(["A vs B", *measures], [
        [f"{a} vs {b}", *(f"{c['ratio']:.3f} [{c['low']:.3f}-{c['high']:.3f}]; {c['above']}/{len(c['seeds'])};"
                          f" p={c['p']:.3g}" for c in cells[(a, b)].values())] for a, b in pairs_])
    print()
    first = next(iter(measures))
    for (a, b), by_measure in cells.items():
        c = by_measure[first]
        print(f"{a} / {b}, {first}, seeds {', '.join(map(str, c['seeds']))}: "
              + ", ".join(f"{r:.3f}" for r in c["ratios"]))


def print_endpoints(preset: str, by_method: dict) -> dict:
    """The pre-registered endpoints (benchmarks/LEARNING.md): toy-length-dense's late phase (late_phase.py), the
    format ablation's family A on toy-budget without format, or toy-budget's F1-F3 (budget_endpoints.py)."""
    import late_phase
    from budget_endpoints import print_budget_tables

    runs = next(iter(by_method.values()))
    if preset == LENGTH_DENSE_PRESET:
        return late_phase.print_length_dense_tables(by_method)
    if late_phase.is_format_ablation(preset, runs):
        return late_phase.print_ablation_tables(by_method, late_phase.with_format_runs())
    return print_budget_tables(by_method, runs[0]["steps"] + 1)


def plot(data: dict, path: Path) -> Path:
    """`dara-train plot`'s picture of several runs: per method, each reward's training mean, density,
    applied weight (and energy share, where the runs kept it) as median and interquartile band over seeds."""
    from dara_train.plot import plot_runs, training_records

    runs = {}
    for run in data["runs"]:
        runs.setdefault(run["method"], []).append(
            training_records(run["records"], f"{run['method']} seed {run['seed']}"))
    return plot_runs(runs, path, f"{data['preset']}: median and interquartile range over seeds")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="toy-paper",
                        help="a dara-train preset (toy-paper, toy-gated-length, toy, toy-shift)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds for " + ", ".join(FULLY_SEEDED))
    parser.add_argument("--other-seeds", type=int, default=5, help="seeds for every other method")
    parser.add_argument("--first-seed", type=int, default=0, help="the seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--methods", help="comma-separated (default: " + ",".join(MAIN_METHODS) + "; on "
                        + BUDGET_PRESET + ", every method with --seeds: " + ",".join(BUDGET_METHODS) + ")")
    parser.add_argument("--baselines", action="store_true", help="add the other Table-5 baselines: "
                        + ", ".join(TABLE5_BASELINES))
    parser.add_argument("--static-weights", help="the weights of static-asym and static-sym, e.g. 1,5,1 "
                        "(default: 5 on the preset's sparse reward)")
    parser.add_argument("--group-sizes", help="comma-separated group sizes, each at the preset's replies per step")
    parser.add_argument("--steps", type=int, help="override the preset's run length")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a dara-train override applied to every run")
    parser.add_argument("--thresholds", metavar="REWARD=VALUE,...", help="count steps to these thresholds in "
                        "the tables instead of the runs' own (what another cut-off would show; the file is unchanged)")
    parser.add_argument("--jobs", type=int, help="runs in parallel (default: the CPU count)")
    parser.add_argument("--json", help="results file (default benchmarks/results/learning-<preset>.json)")
    parser.add_argument("--stability", action="store_true", help="also print the format drops, generation cost "
                        "and dynamic-sampling counts per method, and the paired area endpoint (LEARNING.md)")
    parser.add_argument("--plot", metavar="PNG", help="write a PNG of median and interquartile curves per method to "
                        "this path")
    parser.add_argument("--run", action="store_true", help="train the runs the results file lacks (or holds with "
                        "other overrides) and write them to it; without it the file is only read")
    args = parser.parse_args(argv)

    from dara_train.config import load_config

    methods = args.methods or ",".join(BUDGET_METHODS if args.preset in BUDGET_PRESETS else MAIN_METHODS)
    names = [m for m in methods.split(",") if m] + (TABLE5_BASELINES if args.baselines else [])
    static = args.static_weights or DEFAULT_STATIC_WEIGHTS.get(args.preset, "1,5,1")
    rollout = load_config(args.preset, None, args.settings).rollout
    groups = [int(g) for g in args.group_sizes.split(",")] if args.group_sizes else []
    specs = method_specs(names, static, groups, rollout.group_size, rollout.group_size * rollout.prompts_per_step)
    path = Path(args.json or Path(__file__).parent / "results" / f"learning-{args.preset}.json")
    data = load_results(path, args.preset, args.steps, args.settings, args.run)
    if args.run:
        stale = stale_runs(data, specs)
        if stale:
            print(f"{len(stale)} runs in {path} were made with other overrides for their method; rerunning them",
                  file=sys.stderr)
            data["runs"] = [r for r in data["runs"] if r not in stale]
        run_all(args, specs, data, path)
    else:
        check_complete(args, specs, data, path)
    # The tables cover exactly the runs asked for, whatever else the file holds.
    order = list(specs)
    asked = [r for r in data["runs"] if r["method"] in specs and r["seed"] in seeds_of(args, r["method"])]
    data["runs"] = sorted(asked, key=lambda r: (order.index(r["method"]), r["seed"]))
    if args.thresholds:
        # Another cut-off for the tables only: the runs keep theirs in the file.
        cutoffs = {k: float(v) for k, v in (item.split("=") for item in args.thresholds.split(","))}
        data["runs"] = [{**r, "thresholds": {**r["thresholds"], **cutoffs}} for r in data["runs"]]
    print_tables(data, summarize_methods(data))
    if args.preset in BUDGET_PRESETS:
        print_endpoints(args.preset, {m: [r for r in data["runs"] if r["method"] == m] for m in order
                                      if any(r["method"] == m for r in data["runs"])})
    if args.stability:
        print_stability(data, rollout.group_size * rollout.prompts_per_step)
    print(f"\nruns: {path}")
    if args.plot:
        print(f"curves: {plot(data, Path(args.plot))}")


if __name__ == "__main__":
    main()
