"""Microbenchmark: the fused backends against the eager reference, torch.compile
of it, TRL-style and verl-style GDPO, and the memory floor, in one process.

    python benchmarks/microbench.py [--quick] [--device cpu|cuda] [--json PATH] [--plot PATH]
    python benchmarks/microbench.py --targets-only [--runs 5] [--build] --json PATH   # the deployment rows (targets.py)

The sweep varies one axis at a time around the headline point (N = 1,048,576
on CPU, 16,777,216 on GPU; K = 4; G = 16; method dara; contiguous groups):
N, K, G, method and layout. Memory floor = bytes that must move (rewards read
once, advantages, keep and query_scale written once) / copy bandwidth
measured in this run.

An implementation that raises is a row `failed: <reason>` and the run goes
on; a requested backend that cannot run here is a row `unavailable: <reason>`.
The exit status is 0 when every requested backend ran on every config,
whatever the baselines did.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baselines import trl_style_gdpo, verl_style_gdpo  # noqa: E402
from failure import failure_reason  # noqa: E402
from targets import format_targets, run_targets  # noqa: E402

import dara_kernels as dk  # noqa: E402
from dara_kernels.backends import compiled_for  # noqa: E402
from dara_kernels.options import resolve_options  # noqa: E402
from dara_kernels.reference import reference_advantage  # noqa: E402
from dara_kernels.validation import prepare_inputs  # noqa: E402


@dataclass(frozen=True)
class Config:
    n: int
    k: int
    g: int
    method: str
    layout: str


def sweep(device: str, quick: bool) -> list[Config]:
    if quick:
        return [Config(16384, 4, 16, "dara", "fixed"), Config(16384, 4, 16, "gd2po_hard", "shuffled")]
    big = 16_777_216 if device == "cuda" else 1_048_576
    ns = [2048, 16384, 131072, 1_048_576] + ([16_777_216, 67_108_864] if device == "cuda" else [])
    head = Config(big, 4, 16, "dara", "fixed")
    configs = [Config(n, 4, 16, "dara", "fixed") for n in ns]
    if device == "cuda":
        configs.append(Config(16384, 3, 16, "dara", "fixed"))
    configs += [Config(head.n, k, 16, "dara", "fixed") for k in (2, 3, 8)]
    configs += [Config(head.n, 4, g, "dara", "fixed") for g in (4, 8, 32)]
    configs += [Config(head.n, 4, 16, m, "fixed") for m in ("gdpo", "gd2po_hard")]
    configs += [Config(head.n, 4, 16, m, "shuffled") for m in ("gdpo", "dara", "gd2po_hard")]
    return list(dict.fromkeys(configs))


def make_batch(cfg: Config, device: str):
    gen = torch.Generator().manual_seed(cfg.n + cfg.k + cfg.g)
    p = torch.linspace(0.05, 0.9, cfg.k)
    rewards = (torch.rand(cfg.n, cfg.k, generator=gen) < p).float()
    if cfg.layout == "fixed":
        layout = {"group_size": cfg.g}
        uids = np.repeat(np.arange(cfg.n // cfg.g), cfg.g)
    else:
        ids = torch.randperm(cfg.n, generator=gen) // cfg.g
        layout = {"group_index": ids.to(device)}
        uids = ids.numpy()
    return rewards.to(device), layout, np.array([f"uid-{u}" for u in uids], dtype=object)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(fn, device: str, budget_s: float, max_repeats: int, warmup: bool = True) -> float:
    """Median seconds per call over repeats that fit the budget (after one warm-up)."""
    if warmup:
        fn()
        synchronize(device)
    times = []
    start = time.perf_counter()
    while len(times) < max_repeats and (len(times) < min(3, max_repeats) or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: str) -> float:
    """Bytes per second of a large device copy (read + write counted)."""
    nbytes = (1 << 30) if device == "cuda" else (256 << 20)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    seconds = measure(lambda: dst.copy_(src), device, 1.0, 20)
    return 2 * nbytes / seconds


def floor_bytes(cfg: Config, reward_bytes: int = 4) -> int:
    index = 8 * cfg.n if cfg.layout == "shuffled" else 0
    return cfg.n * cfg.k * reward_bytes + index + cfg.n * (4 + 1 + 4)


@contextlib.contextmanager
def aten_scatter_adds():
    """Inductor lowers scatter-adds to ATen's kernels under deterministic
    algorithms (torch._inductor.utils.use_scatter_fallback); the filling of
    fresh memory that deterministic mode also turns on is left off."""
    previous = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0])
        torch.utils.deterministic.fill_uninitialized_memory = previous[1]


# A workaround, not a fix (the fix is Inductor's; the reference is the oracle
# and stays as written): on CPU, Inductor's vectorised atomic add asserts that
# its index is a vector (codegen/cpp.py, `index.is_vec`), but for contiguous
# groups the reference's group ids are arange(N) // G, the same across a
# vector when G is at least its width, so the compile fails (torch 2.13 on an
# AMD EPYC whose torch CPU capability is AVX2, G = 16: InductorError:
# AssertionError). Loaded ids (a group_index) compile as they are.
COMPILE_NOTE = "contiguous groups on CPU: scatter-adds on ATen (aten_scatter_adds), as Inductor's own fail there"


def compiled_reference(rewards: torch.Tensor, layout: dict, method: str):
    """torch.compile of the float64 reference, on prepared inputs (what a user compiling it would time)."""
    opts = resolve_options(method, None)
    inputs = prepare_inputs(rewards, group_index=layout.get("group_index"), group_size=layout.get("group_size"),
                            reward_weights=None, response_mask=None, response_lengths=None, reward_bounds=None,
                            nan_policy="ignore", batch_norm=opts.batch_norm, validate=False)
    compiled = torch.compile(reference_advantage, dynamic=False)
    if rewards.device.type != "cpu" or inputs.group_index is not None:
        return lambda: compiled(inputs, opts)

    def call():
        with aten_scatter_adds():
            return compiled(inputs, opts)

    return call


def on_n_sweep(cfg: Config) -> bool:
    """The slow baselines (torch.compile, the verl-style loop) run on this line only."""
    return (cfg.k, cfg.g, cfg.method, cfg.layout) == (4, 16, "dara", "fixed")


def implementations(cfg: Config, device: str, args, rewards, layout, uids):
    """name -> a call to time, or the reason a requested backend cannot run here."""
    impls = {}
    for backend in args.backends:
        reason = dk.unavailable_reason(backend, rewards.device, cfg.k)
        impls[backend] = reason or (lambda b=backend: dk.fused_advantage(rewards, method=cfg.method, backend=b,
                                                                          **layout))
    if cfg.n <= args.max_reference_n:
        impls["reference"] = lambda: dk.fused_advantage(rewards, method=cfg.method, backend="reference", **layout)
    if args.compile_baseline and cfg.n <= args.max_reference_n and (on_n_sweep(cfg) or args.quick):
        impls["reference+compile"] = compiled_reference(rewards, layout, cfg.method)
    weights = torch.ones(cfg.k, device=rewards.device)
    if cfg.layout == "fixed" and cfg.method == "gdpo" or (cfg.layout == "fixed" and args.all_baselines):
        impls["trl-style"] = lambda: trl_style_gdpo(rewards, cfg.g, weights)
    if cfg.n <= args.max_verl_n and (on_n_sweep(cfg) or args.quick):
        mask = torch.ones(cfg.n, 1, device=rewards.device)
        impls["verl-style"] = lambda: verl_style_gdpo(rewards.cpu(), uids, weights.cpu(), mask.cpu())
    return impls


def git_commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], text=True,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_info(device: str) -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
            "processor": platform.processor() or platform.machine(), "git_commit": git_commit(),
            "device": device}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


BASELINES = ("reference", "reference+compile", "trl-style", "verl-style")


def _speedup(row: dict, baseline: str, seconds: float) -> str:
    if baseline in row["seconds"]:
        return f"{row['seconds'][baseline] / seconds:12.1f}"
    return f"{'failed' if baseline in row['failed'] else '-':>12}"


def format_table(rows: list[dict], backends: list[str]) -> str:
    """One row per implementation and config: the backends with their speedups over each baseline, then the
    baselines; an implementation that failed or could not run says why instead of a time."""
    lines = []
    head = f"{'N':>10} {'K':>2} {'G':>3} {'method':<10} {'layout':<8} {'impl':<18} {'ms':>9} {'floor%':>7} " + \
        " ".join(f"{'x ' + b:>12}" for b in BASELINES)
    lines.append(head)
    lines.append("-" * len(head))
    for row in rows:
        config = f"{row['n']:>10} {row['k']:>2} {row['g']:>3} {row['method']:<10} {row['layout']:<8}"
        for impl in [*backends, *BASELINES]:
            if impl in row["seconds"]:
                seconds = row["seconds"][impl]
                speedups = " ".join(_speedup(row, b, seconds) for b in BASELINES) if impl in backends else ""
                floor = 100 * row["floor_seconds"] / seconds
                lines.append(f"{config} {impl:<18} {seconds * 1e3:9.3f} {floor:6.1f}% {speedups}".rstrip())
            elif impl in row["failed"]:
                lines.append(f"{config} {impl:<18} failed: {row['failed'][impl]}")
            elif impl in row["unavailable"]:
                lines.append(f"{config} {impl:<18} unavailable: {row['unavailable'][impl]}")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [r for r in rows if r["k"] == 4 and r["g"] == 16 and r["method"] == "dara" and r["layout"] == "fixed"]
    series.sort(key=lambda r: r["n"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    impls = sorted({i for r in series for i in r["seconds"]})
    for impl in impls:
        pts = [(r["n"], r["seconds"][impl] * 1e3) for r in series if impl in r["seconds"]]
        ax.plot(*zip(*pts), marker="o", label=impl)
    ax.plot([r["n"] for r in series], [r["floor_seconds"] * 1e3 for r in series], "k--", label="memory floor")
    ax.set(xscale="log", yscale="log", xlabel="responses N (K=4, G=16, dara)", ylabel="ms per call",
           title="dara-kernels microbenchmark")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="two small configs, seconds")
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--plot", help="write a PNG of time vs N here")
    parser.add_argument("--backends", nargs="+", default=None)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of repeats per measurement")
    parser.add_argument("--max-repeats", type=int, default=50)
    parser.add_argument("--max-reference-n", type=int, default=1_048_576 * 16)
    parser.add_argument("--max-verl-n", type=int, default=1_048_576)
    parser.add_argument("--no-compile-baseline", dest="compile_baseline", action="store_false")
    parser.add_argument("--all-baselines", action="store_true", help="TRL-style for every fixed-layout config")
    parser.add_argument("--targets", action="store_true", help="also run the deployment rows (CPU, targets.py)")
    parser.add_argument("--targets-only", action="store_true", help="run only the deployment rows")
    parser.add_argument("--runs", type=int, default=5, help="times each deployment ratio is measured")
    parser.add_argument("--calls", type=int, default=20, help="calls each side of a ratio is timed over (median)")
    parser.add_argument("--build", action="store_true", help="also time the CPU extension's build (a minute)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA device")
    args.backends = args.backends or list(compiled_for(args.device))
    if args.quick:
        args.max_verl_n = min(args.max_verl_n, 16384)

    info = machine_info(args.device)
    print("machine:", json.dumps(info))
    bandwidth = copy_bandwidth(args.device)
    print(f"copy bandwidth: {bandwidth / 1e9:.1f} GB/s (read + write)", flush=True)
    rows = []
    configs = [] if args.targets_only else sweep(args.device, args.quick)
    for i, cfg in enumerate(configs, 1):
        print(f"[{i}/{len(configs)}] {cfg}", flush=True)
        rewards, layout, uids = make_batch(cfg, args.device)
        impls = implementations(cfg, args.device, args, rewards, layout, uids)
        seconds, failed, unavailable = {}, {}, {}
        for name, fn in impls.items():
            if isinstance(fn, str):
                unavailable[name] = fn
                print(f"  {name}: unavailable: {fn}", flush=True)
                continue
            heavy = name in ("verl-style", "reference+compile") or (name == "reference" and cfg.n > 1 << 20)
            slow_loop = name == "verl-style" and cfg.n > 100_000
            repeats = 1 if slow_loop else min(3, args.max_repeats) if heavy else args.max_repeats
            print(f"  timing {name} ...", end="", flush=True)
            try:
                seconds[name] = measure(fn, args.device, args.budget, repeats, warmup=not slow_loop)
            except Exception as err:  # noqa: BLE001 - a failing implementation is a row; the run goes on
                failed[name] = failure_reason(err)
                print(f" failed: {failed[name]}", flush=True)
                continue
            print(f" {seconds[name] * 1e3:.3f} ms", flush=True)
        rows.append({**asdict(cfg), "seconds": seconds, "failed": failed, "unavailable": unavailable,
                     "floor_seconds": floor_bytes(cfg) / bandwidth})

    targets = run_targets(args.runs, args.calls, args.build) if args.targets or args.targets_only else []

    notes = {}
    if args.device == "cpu" and any("reference+compile" in r["seconds"] and r["layout"] == "fixed" for r in rows):
        notes["reference+compile"] = COMPILE_NOTE
    print()
    if rows:
        print(format_table(rows, args.backends))
    for impl, note in notes.items():
        print(f"{impl}: {note}")
    if targets:
        print(format_targets(targets))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": info, "copy_bandwidth_bytes_per_s": bandwidth, "rows": rows,
                       "targets": targets, "notes": notes}, fh, indent=1)
        print(f"wrote {args.json}")
    if args.plot and rows:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    missing = [f"{row['n']}/{row['k']}/{row['g']}/{row['method']}/{row['layout']} {backend}"
               for row in rows for backend in args.backends if backend not in row["seconds"]]
    if missing:
        print(f"the package's own backends did not run on: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
