"""Compiles, ahead of time and without a GPU, every Triton kernel variant
`fused_advantage(backend="triton")` can launch, for sm_80 and sm_90, through
Triton's own launch path; fails on a launch the runtime would refuse, a
compile error, a register spill, a kernel over REGISTER_BUDGET or over the
arch's shared memory, or a kernel specialised on an option's value or a size.
Prints one row per distinct kernel variant.

The variants are not listed by hand: each call shape (method, K, reward dtype,
group layout, token weights and mask dtype; with --options, every value of
every option as the check sweeps them) runs the real backend code on meta
tensors with a recording launcher, and each launch it records goes through
`JITFunction.run(..., warmup=True)` as a real launch does, with a driver that
names the GPU target: Triton's launch binder (built from the kernel's
parameters), its argument specialisation and cache key, its option parsing.
The distinct cache keys are what the runtime would compile; each is compiled
by the same call with its compile let through. What only a GPU does
after that: loading the binary, the launcher's argument packing, the launch.
The interpreter (TRITON_INTERPRET=1) would hide all of it, so it is switched
off for this script.

    python scripts/check_triton_compiles.py [--arch 80 90] [--jobs 2] [--json PATH] [--quick] [--options]
        [--bind-only]

--quick takes one call shape per layout and method (K=3, float32, no token
weights): the test suite's smoke check that every kernel still compiles.
--bind-only stops before compiling: the launch path and the specialisation
check for every call shape, in seconds.
"""
from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.pop("TRITON_INTERPRET", None)
# A fresh cache: a kernel compiled by an earlier run must not pass unchecked.
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="dara-triton-aot-")
atexit.register(shutil.rmtree, os.environ["TRITON_CACHE_DIR"], ignore_errors=True)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

# 128 registers per thread keeps PROGRAMS_PER_SM (8) accumulate programs of
# 2 warps resident on one SM (65,536 registers / (8 * 64 threads)).
REGISTER_BUDGET = 128
# The most shared memory one program may use (opt-in), by arch: A100, H100/H200.
SHARED_MEMORY_LIMIT = {80: 166912, 90: 232448}
KS = (1, 3, 4, 8, 16)
REWARD_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# None: no token weights; "lengths": response_lengths; a dtype: response_mask of that dtype.
TOKEN_INPUTS = (None, "lengths", torch.bool, torch.uint8, torch.int64, torch.float32)
LAYOUTS = ("fixed", "shuffled")
META = torch.device("meta")


class CompileOnlyDriver:
    """triton.runtime.driver.active where there is no GPU, for one target at
    a time. JITFunction.run asks its driver for the current device, stream
    and target, and nothing else before its launch, which warmup=True skips.
    The device is the arch, so that each arch has its own binder and caches."""

    def __init__(self):
        self.arch = 90

    def get_current_device(self) -> int:
        return self.arch

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.arch, 32)


DRIVER = CompileOnlyDriver()


def target(arch: int) -> None:
    from triton.runtime import driver

    DRIVER.arch = arch
    driver.set_active(DRIVER)


def call_launches(rewards, layout: dict, options: dict) -> list[tuple]:
    """(kernel, grid, arguments, keywords) of every launch one fused_advantage call makes, its tensors moved
    to the meta device."""
    import dara_kernels as dk
    from dara_kernels.triton.fused import fused_advantage
    from dara_kernels.validation import prepare_inputs

    def meta(value):
        return value.to(META) if isinstance(value, torch.Tensor) else value

    given = {k: v for k, v in options.items() if k not in ("method", "preset", "reward_weights", "reward_bounds")}
    opts = dk.resolve_options(options.get("method", "dara"), options.get("preset"), **given)
    layout = {k: meta(v) for k, v in layout.items()}
    inputs = prepare_inputs(
        rewards.to(META), group_size=layout.get("group_size"), group_index=layout.get("group_index"),
        reward_weights=meta(options.get("reward_weights")), response_mask=layout.get("response_mask"),
        response_lengths=layout.get("response_lengths"), reward_bounds=meta(options.get("reward_bounds")),
        nan_policy=opts.nan_policy, batch_norm=opts.batch_norm, reward_names=opts.reward_names,
        reward_gates=opts.reward_gates, validate=False)
    launches = []

    def record(kernel, grid, *args, **keywords):
        launches.append((kernel, grid, args, keywords))

    fused_advantage(inputs.rewards, inputs.group_index, inputs.group_size, inputs.reward_weights,
                    inputs.response_mask, inputs.response_lengths, inputs.reward_bounds, None, None,
                    opts.kernel_vectors[0], run=record)
    return launches


def shape_launches(method: str, k: int, dtype: torch.dtype, layout: str, token) -> list[tuple]:
    n, group = 96, 8
    rewards = torch.empty(n, k, dtype=dtype, device=META)
    inputs = {"group_index": torch.empty(n, dtype=torch.int64, device=META)} if layout == "shuffled" else \
        {"group_size": group}
    if isinstance(token, torch.dtype):
        inputs["response_mask"] = torch.empty(n, 5, dtype=token, device=META)
    elif token == "lengths":
        inputs["response_lengths"] = torch.empty(n, dtype=torch.float64, device=META)
    return call_launches(rewards, inputs, {"method": method, "batch_norm": "token" if token is not None else None})


def option_launches(index: int) -> list[tuple]:
    """The launches of the check's option sweep's call `index` (every value of every option, every preset)."""
    from dara_kernels.check.table_sweeps import option_calls

    call = next(itertools.islice(option_calls(), index, None))
    return call_launches(call.rewards, call.inputs, call.options)


def source_launches(source: tuple) -> list[tuple]:
    """The launches of one source of calls: ("shape", method, k, dtype, layout, token) or ("option", index)."""
    return shape_launches(*source[1:]) if source[0] == "shape" else option_launches(source[1])


def _flat(types) -> list:
    return [t for item in types for t in _flat(item)] if isinstance(types, (tuple, list)) else [types]


class LaunchRefused(RuntimeError):
    """Triton's runtime raised on a launch before compiling it."""


def runtime_variant(launch: tuple, arch: int) -> dict:
    """What JITFunction.run would compile for this launch on `arch`, found by running it with its compile
    skipped (knobs.runtime.jit_cache_hook): the runtime's cache key and the signature it specialised."""
    from triton import knobs

    kernel, grid, args, keywords = launch
    seen = []

    def skip_compile(*, key, compile, **_):
        seen.append({"key": key, "signature": compile["signature"]})
        return True

    previous, knobs.runtime.jit_cache_hook = knobs.runtime.jit_cache_hook, skip_compile
    try:
        target(arch)
        kernel.run(*args, grid=grid, warmup=True, **keywords)
    except Exception as err:
        raise LaunchRefused(f"{kernel.fn.__name__} sm_{arch}: the runtime's launch path raised "
                            f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}") from err
    finally:
        knobs.runtime.jit_cache_hook = previous
    (variant,) = seen
    constexprs = {p.name for p in kernel.params if p.is_constexpr}
    variant["specialised"] = sorted(name for name, types in variant["signature"].items()
                                    if name not in constexprs and "constexpr" in _flat(types))
    variant["describe"] = _describe(variant["signature"], keywords)
    return variant


def _kernel(name: str):
    from dara_kernels.triton import accumulate, apply, finalize

    return {"accumulate_kernel": accumulate.accumulate_kernel, "apply_kernel": apply.apply_kernel,
            "finalize_kernel": finalize.finalize_kernel}[name]


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself used for this arch (it reads the PTX version Triton wrote)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(arch).path


def compile_variant(job: tuple) -> dict:
    """Compiles one variant for one arch as a launch does: the launch that first showed it, rebuilt here,
    through JITFunction.run(..., warmup=True), which compiles and stops before the launch. Returns its
    resource use or its error."""
    source, index, arch, describe = job
    kernel, grid, args, keywords = source_launches(source)[index]
    row = {"kernel": kernel.fn.__name__, "arch": f"sm_{arch}", "variant": describe}
    started = time.perf_counter()
    try:
        target(arch)
        compiled = kernel.run(*args, grid=grid, warmup=True, **keywords)
        row.update(_resources(compiled.asm["ptx"], arch))
        row["shared"] = compiled.metadata.shared
    except Exception as err:  # noqa: BLE001 (every compile failure is reported, none is fatal here)
        row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def _resources(ptx: str, arch: int) -> dict:
    target = re.search(r"^\.target\s+(\S+)", ptx, re.MULTILINE).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        command = [_ptxas(arch), f"-arch={target}", "-v", str(path), "-o", str(path.with_suffix(".cubin"))]
        report = subprocess.run(command, capture_output=True, text=True, check=True).stderr
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    spill_stores, spill_loads = map(int, re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads",
                                                   report).groups())
    stack = int(re.search(r"(\d+) bytes stack frame", report).group(1))
    return {"registers": registers, "spill_bytes": spill_stores + spill_loads, "stack": stack}


def _describe(signature: dict, keywords: dict) -> str:
    parts = [f"{k}={v}" for k, v in sorted(keywords.items())]
    if "rewards_ptr" in signature:
        parts.append(f"rewards={signature['rewards_ptr'][1:]}")
    return " ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[80, 90])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=pathlib.Path, help="write every row here")
    parser.add_argument("--quick", action="store_true", help="one call shape per layout and method")
    parser.add_argument("--options", action="store_true", help="also every value of every option (the check's)")
    parser.add_argument("--bind-only", action="store_true", help="the launch path only, no compile")
    args = parser.parse_args()
    started = time.perf_counter()

    from dara_kernels import METHODS

    if args.quick:
        shapes = list(itertools.product(METHODS, (3,), (torch.float32,), LAYOUTS, (None,)))
    else:
        shapes = list(itertools.product(METHODS, KS, REWARD_DTYPES, LAYOUTS, TOKEN_INPUTS))
    sources = [("shape", *shape) for shape in shapes]
    if args.options:
        from dara_kernels.check.table_sweeps import option_calls

        sources += [("option", i) for i in range(sum(1 for _ in option_calls()))]
    failures, variants, launches = [], {}, 0
    for source in sources:
        for index, launch in enumerate(source_launches(source)):
            launches += 1
            for arch in args.arch:
                try:
                    variant = runtime_variant(launch, arch)
                except LaunchRefused as err:
                    failures.append(str(err))
                    continue
                name = launch[0].fn.__name__
                if variant["specialised"]:
                    failures.append(f"{name} sm_{arch}: specialised on the value of "
                                    f"{', '.join(variant['specialised'])} (each value would be a kernel variant of "
                                    "its own, compiled on first use)")
                variants.setdefault((name, arch, variant["key"]), (source, index, arch, variant["describe"]))
    print(f"[triton-aot] {len(shapes)} call shapes{' and the option sweep' if args.options else ''}: "
          f"{launches} launches through the runtime's launch path for sm_{', sm_'.join(map(str, args.arch))}, "
          f"{len(variants)} distinct kernel variants ({time.perf_counter() - started:.0f} s)", flush=True)
    rows = []
    if not args.bind_only:
        jobs = list(variants.values())
        print(f"[triton-aot] compiling {len(jobs)} with {args.jobs} processes", flush=True)
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for i, row in enumerate(pool.map(compile_variant, jobs, chunksize=4), 1):
                rows.append(row)
                if i % 20 == 0 or i == len(jobs):
                    print(f"[triton-aot] {i}/{len(jobs)} compiled ({time.perf_counter() - started:.0f} s)",
                          flush=True)
        failures += _report(rows)
    if args.json:
        args.json.write_text(json.dumps({"register_budget": REGISTER_BUDGET, "rows": rows}, indent=1))
    print(f"[triton-aot] {len(rows)} compiles in {time.perf_counter() - started:.0f} s, {len(failures)} failures")
    for failure in failures:
        print(f"[triton-aot] FAIL {failure}")
    return 1 if failures else 0


def _report(rows: list[dict]) -> list[str]:
    """Prints a row per compile; returns the failures: errors, spills, registers over the budget, shared
    memory over the arch's limit."""
    failures = []
    print(f"{'kernel':<18} {'arch':<6} {'regs':>4} {'spill':>5} {'stack':>5} {'smem':>6}  variant")
    for row in sorted(rows, key=lambda r: (r["kernel"], r["arch"], r["variant"])):
        where = f"{row['kernel']} {row['arch']} {row['variant']}"
        if "error" in row:
            failures.append(f"{where}: {row['error']}")
            print(f"{row['kernel']:<18} {row['arch']:<6} COMPILE ERROR  {row['variant']}")
            continue
        print(f"{row['kernel']:<18} {row['arch']:<6} {row['registers']:>4} {row['spill_bytes']:>5} {row['stack']:>5} "
              f"{row['shared']:>6}  {row['variant']}")
        if row["spill_bytes"]:
            failures.append(f"{where}: spills {row['spill_bytes']} bytes")
        if row["registers"] > REGISTER_BUDGET:
            failures.append(f"{where}: {row['registers']} registers > budget {REGISTER_BUDGET}")
        limit = SHARED_MEMORY_LIMIT[int(row["arch"][3:])]
        if row["shared"] > limit:
            failures.append(f"{where}: {row['shared']} bytes of shared memory > the arch's {limit}")
    compiled = [r for r in rows if "error" not in r]
    if compiled:
        worst = max(compiled, key=lambda r: r["registers"])
        print(f"[triton-aot] most registers: {worst['registers']} ({worst['kernel']} {worst['arch']} "
              f"{worst['variant']}); budget {REGISTER_BUDGET}")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
