"""GPU acceptance numbers for the fused backends, against their targets.

    python benchmarks/gpu_summary.py measure --json gpu-out/acceptance.json [--device cuda]
    python benchmarks/gpu_summary.py report gpu-out/acceptance.json --json gpu-out/summary.json

`measure` times two points per backend: the bandwidth point (N = 2^24, K = 4,
G = 16, dara, contiguous groups; target >= 80% of copy bandwidth) and the
latency point (N = 16,384, K = 3; target <= 10 us per call), the eager
float64 reference and torch.compile of it at both, and at the latency point
the kernels one call launches (target <= 2; memsets and copies are listed
beside them) and the host synchronisations it makes (target 0). It writes the JSON after
each stage, so a step killed by its timeout keeps what it had; the slow
torch.compile baselines come last. `--device cpu` runs the same code on the
CPU backend (no launch or sync counts) to check the script without a GPU.
`report` turns that JSON into the table and a pass/fail summary.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from failure import failure_reason  # noqa: E402
from microbench import Config, compiled_reference, copy_bandwidth, floor_bytes, make_batch, measure  # noqa: E402

import dara_kernels as dk  # noqa: E402
from dara_kernels.backends import compiled_for  # noqa: E402

BANDWIDTH_N = 1 << 24
LATENCY = Config(16384, 3, 16, "dara", "fixed")
TARGETS = {"floor_fraction": 0.80, "latency_us": 10.0, "launches_per_call": 2, "host_syncs_per_call": 0}
MEMORY_OPS = ("Memset", "Memcpy")  # the profiler's names for device memsets and copies; the rest are kernels
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
PROFILED_CALLS = 10


def call(rewards, cfg: Config, backend: str, validate: bool = True):
    return dk.fused_advantage(rewards, cfg.g, method=cfg.method, backend=backend, validate=validate)


def gpu_operations(rewards, cfg: Config, backend: str) -> dict:
    """Device-side events (kernels, memsets, memcpys) per call, by name, and the host syncs per call."""
    from torch.profiler import DeviceType, ProfilerActivity, profile

    run = lambda: call(rewards, cfg, backend, validate=False)  # noqa: E731
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED_CALLS):
            run()
        torch.cuda.synchronize()
    device_ops = Counter(e.name for e in prof.events() if e.device_type == DeviceType.CUDA)
    kernels = sum(count for name, count in device_ops.items() if not name.startswith(MEMORY_OPS))
    runtime_syncs = Counter(e.name for e in prof.events() if e.device_type == DeviceType.CPU and e.name in SYNC_CALLS)
    runtime_syncs["cudaDeviceSynchronize"] -= 1  # the harness's own, after the loop
    runtime_syncs = +runtime_syncs
    torch.cuda.set_sync_debug_mode("error")
    try:
        run()
        sync_error = None
    except RuntimeError as err:
        sync_error = str(err).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return {
        "launches_per_call": kernels / PROFILED_CALLS,
        "gpu_ops": {name: count / PROFILED_CALLS for name, count in device_ops.items()},
        "host_syncs_per_call": max(sum(runtime_syncs.values()) / PROFILED_CALLS, 1 if sync_error else 0),
        "host_syncs": dict(runtime_syncs),
        "sync_debug_error": sync_error,
    }


def measure_all(args) -> None:
    device = args.device
    backends = [b for b in args.backends if dk.unavailable_reason(b, torch.device(device)) is None]
    skipped = {b: dk.unavailable_reason(b, torch.device(device)) for b in args.backends if b not in backends}
    points = {"bandwidth": Config(args.bandwidth_n, 4, 16, "dara", "fixed"), "latency": LATENCY}
    result = {"device": device, "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
              "torch": torch.__version__, "targets": TARGETS, "skipped_backends": skipped, "points": {}}

    def save():
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)

    result["copy_bandwidth_bytes_per_s"] = bandwidth = copy_bandwidth(device)
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)
    batches = {}
    for point, cfg in points.items():
        rewards, _, _ = make_batch(cfg, device)
        batches[point] = rewards
        entry = result["points"][point] = {"config": cfg.__dict__, "floor_seconds": floor_bytes(cfg) / bandwidth,
                                           "seconds": {}}
        for name in backends + ["reference"]:
            entry["seconds"][name] = measure(lambda n=name, r=rewards, c=cfg: call(r, c, n), device, args.budget, 50)
            print(f"{point}: {name} {entry['seconds'][name] * 1e6:.1f} us", flush=True)
            save()
    if device == "cuda":
        result["launches"] = {b: gpu_operations(batches["latency"], LATENCY, b) for b in backends}
        print("launches:", json.dumps(result["launches"], indent=1), flush=True)
        save()
    if args.compile_baseline:
        for point, cfg in points.items():
            print(f"{point}: compiling the reference ...", flush=True)
            try:
                seconds = measure(compiled_reference(batches[point], {"group_size": cfg.g}, cfg.method), device,
                                  args.budget, 10)
            except Exception as err:  # noqa: BLE001 - a failing baseline is recorded; the backends' numbers stand
                result["points"][point]["failed"] = {"reference+compile": failure_reason(err)}
                print(f"{point}: reference+compile failed: {failure_reason(err)}", flush=True)
            else:
                result["points"][point]["seconds"]["reference+compile"] = seconds
                print(f"{point}: reference+compile {seconds * 1e6:.1f} us", flush=True)
            save()
    print(f"wrote {args.json}")


def backend_summary(data: dict, backend: str) -> dict:
    bw, lat = data["points"].get("bandwidth", {}), data["points"].get("latency", {})
    out = {}
    if backend in bw.get("seconds", {}):
        out["floor_fraction"] = bw["floor_seconds"] / bw["seconds"][backend]
    if backend in lat.get("seconds", {}):
        out["latency_us"] = lat["seconds"][backend] * 1e6
    for point, entry in (("bandwidth", bw), ("latency", lat)):
        seconds = entry.get("seconds", {})
        for baseline in ("reference", "reference+compile"):
            if backend in seconds and baseline in seconds:
                out[f"speedup_vs_{baseline}@{point}"] = seconds[baseline] / seconds[backend]
    launches = data.get("launches", {}).get(backend)
    if launches:
        out["launches_per_call"] = launches["launches_per_call"]
        out["host_syncs_per_call"] = launches["host_syncs_per_call"]
    return out


def verdicts(summary: dict) -> dict:
    checks = {"floor_fraction": lambda v: v >= TARGETS["floor_fraction"],
              "latency_us": lambda v: v <= TARGETS["latency_us"],
              "launches_per_call": lambda v: v <= TARGETS["launches_per_call"],
              "host_syncs_per_call": lambda v: v <= TARGETS["host_syncs_per_call"]}
    return {name: ("pass" if check(summary[name]) else "FAIL") if name in summary else "not measured"
            for name, check in checks.items()}


ROWS = [
    ("floor_fraction", "copy-bandwidth fraction, N={bn} K=4", ">= 80%", lambda v: f"{100 * v:.1f}%"),
    ("latency_us", "us per call, N=16384 K=3", "<= 10", lambda v: f"{v:.1f}"),
    ("speedup_vs_reference@bandwidth", "x eager reference, N={bn}", "", lambda v: f"{v:.1f}x"),
    ("speedup_vs_reference+compile@bandwidth", "x compiled reference, N={bn}", "", lambda v: f"{v:.1f}x"),
    ("speedup_vs_reference@latency", "x eager reference, N=16384", "", lambda v: f"{v:.1f}x"),
    ("speedup_vs_reference+compile@latency", "x compiled reference, N=16384", "", lambda v: f"{v:.1f}x"),
    ("launches_per_call", "kernel launches per call", "<= 2", lambda v: f"{v:g}"),
    ("host_syncs_per_call", "host syncs per call", "0", lambda v: f"{v:g}"),
]


def report(args) -> int:
    with open(args.acceptance) as fh:
        data = json.load(fh)
    backends = [b for b in compiled_for("cuda") + compiled_for("cpu")
                if b in data["points"].get("latency", {}).get("seconds", {})
                or b in data["points"].get("bandwidth", {}).get("seconds", {})]
    summaries = {b: backend_summary(data, b) for b in backends}
    verdict = {b: verdicts(summaries[b]) for b in backends}
    bandwidth = data.get("copy_bandwidth_bytes_per_s")
    print(f"{data.get('gpu') or data['device']}, torch {data['torch']}, copy bandwidth "
          f"{bandwidth / 1e9 if bandwidth else float('nan'):.0f} GB/s")
    bn = data["points"].get("bandwidth", {}).get("config", {}).get("n", BANDWIDTH_N)
    rows = [(key, label.format(bn=bn), target, fmt) for key, label, target, fmt in ROWS]
    width = max(len(label) for _, label, _, _ in rows)
    print(f"{'':<{width}}  {'target':>7}  " + "  ".join(f"{b:>16}" for b in backends))
    for key, label, target, fmt in rows:
        cells = []
        for b in backends:
            value = summaries[b].get(key)
            mark = verdict[b].get(key, "")
            cells.append(f"{(fmt(value) if value is not None else '-') + (' ' + mark if mark == 'FAIL' else ''):>16}")
        print(f"{label:<{width}}  {target:>7}  " + "  ".join(cells))
    for b in backends:
        launches = data.get("launches", {}).get(b)
        if launches:
            ops = ", ".join(f"{name} x{count:g}" for name, count in launches["gpu_ops"].items())
            print(f"{b}: device operations per call: {ops or 'none'}")
            if launches["sync_debug_error"]:
                print(f"{b}: host sync: {launches['sync_debug_error']}")
    for b, reason in data.get("skipped_backends", {}).items():
        print(f"{b}: not measured: {reason}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"summary": summaries, "verdict": verdict, "targets": TARGETS,
                       "skipped_backends": data.get("skipped_backends", {})}, fh, indent=1)
        print(f"wrote {args.json}")
    failed = [f"{b}:{name}" for b in backends for name, v in verdict[b].items() if v == "FAIL"]
    if failed:
        print("targets missed: " + ", ".join(failed))
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the acceptance points (on the GPU)")
    m.add_argument("--json", required=True)
    m.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    m.add_argument("--backends", nargs="+", default=None)
    m.add_argument("--budget", type=float, default=0.5, help="seconds of repeats per measurement")
    m.add_argument("--bandwidth-n", type=int, default=BANDWIDTH_N,
                   help="rows at the bandwidth point (smaller for a quick run of the script on a CPU)")
    m.add_argument("--no-compile-baseline", dest="compile_baseline", action="store_false")
    r = sub.add_parser("report", help="table and pass/fail from a measure JSON")
    r.add_argument("acceptance")
    r.add_argument("--json", help="write the summary here")
    args = parser.parse_args(argv)
    if args.command == "measure":
        if args.device == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda but torch sees no CUDA device")
        args.backends = args.backends or list(compiled_for(args.device))
        measure_all(args)
        return 0
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
