"""Compiles, ahead of time and without a GPU, every Triton kernel variant
`fused_advantage(backend="triton")` can launch, for sm_80 and sm_90, with
Triton's own compiler; fails on a compile error, a register spill, or a kernel
over REGISTER_BUDGET. Prints one row per distinct kernel variant.

The variants are not listed by hand: each call shape (method, K, reward dtype,
group layout, token weights and mask dtype) runs the real backend code on meta
tensors with a recording launcher, so what compiles here is what the op
launches. The interpreter (TRITON_INTERPRET=1) would hide compile errors, so it
is switched off for this script.

    python scripts/check_triton_compiles.py [--arch 80 90] [--jobs 2] [--json PATH] [--quick]

--quick compiles one call shape per layout (K=3, float32, no token weights):
the test suite's smoke check that every kernel still compiles.
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
COMPILE_OPTIONS = ("num_warps", "maxnreg")
KS = (1, 3, 4, 8, 16)
REWARD_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# None: no token weights; "lengths": response_lengths; a dtype: response_mask of that dtype.
TOKEN_INPUTS = (None, "lengths", torch.bool, torch.uint8, torch.int64, torch.float32)
LAYOUTS = ("fixed", "shuffled")

_TRITON_TYPES = {torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16",
                 torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8",
                 torch.bool: "i1"}


def _argument_type(value):
    """A launch argument's Triton type; a tuple's (the kernel options, the group table) is the tuple of
    its elements' types, of the same namedtuple class."""
    if isinstance(value, tuple):
        types = [_argument_type(v) for v in value]
        return type(value)(*types) if hasattr(value, "_fields") else tuple(types)
    if isinstance(value, torch.Tensor):
        return "*" + _TRITON_TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def recorded_launches(method: str, k: int, dtype: torch.dtype, layout: str, token) -> list[tuple]:
    """(kernel name, signature, constexprs, compile options) of every launch one call makes."""
    import dara_kernels as dk
    from dara_kernels.triton.fused import fused_advantage_triton
    from dara_kernels.validation import prepare_inputs

    n, group = 96, 8
    meta = torch.device("meta")
    rewards = torch.empty(n, k, dtype=dtype, device=meta)
    group_index = torch.empty(n, dtype=torch.int64, device=meta) if layout == "shuffled" else None
    mask = torch.empty(n, 5, dtype=token, device=meta) if isinstance(token, torch.dtype) else None
    lengths = torch.empty(n, dtype=torch.float64, device=meta) if token == "lengths" else None
    opts = dk.resolve_options(method, None, batch_norm="token" if token is not None else None)
    inputs = prepare_inputs(rewards, group_size=None if group_index is not None else group, group_index=group_index,
                            reward_weights=None, response_mask=mask, response_lengths=lengths, reward_bounds=None,
                            nan_policy=opts.nan_policy, batch_norm=opts.batch_norm, validate=False)
    launches = []

    def record(kernel, grid, *args, **keywords):
        options = tuple(sorted((k, v) for k, v in keywords.items() if k in COMPILE_OPTIONS))
        constexprs = {k: v for k, v in keywords.items() if k not in COMPILE_OPTIONS}
        signature = {name: _argument_type(value) for name, value in zip(kernel.arg_names, args)}
        signature.update({name: "constexpr" for name in constexprs})
        launches.append((kernel.fn.__name__, tuple(signature.items()), tuple(sorted(constexprs.items())), options))

    fused_advantage_triton(inputs, opts, run=record)
    return launches


def _kernel(name: str):
    from dara_kernels.triton import accumulate, apply, finalize

    return {"accumulate_kernel": accumulate.accumulate_kernel, "apply_kernel": apply.apply_kernel,
            "finalize_kernel": finalize.finalize_kernel}[name]


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself used for this arch (it reads the PTX version Triton wrote)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(arch).path


def compile_variant(job: tuple) -> dict:
    """Compiles one variant for one arch; returns its resource use or its error."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name, signature, constexprs, options, arch = job
    row = {"kernel": name, "arch": f"sm_{arch}", "variant": _describe(signature, constexprs + options)}
    started = time.perf_counter()
    try:
        source = ASTSource(_kernel(name), dict(signature), dict(constexprs))
        compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=dict(options))
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


def _describe(signature, constexprs) -> str:
    pointers = [t for name, t in signature if name in ("rewards_ptr",)]
    parts = [f"{k}={v}" for k, v in constexprs]
    return " ".join(parts + [f"rewards={p[1:]}" for p in pointers])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[80, 90])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=pathlib.Path, help="write every row here")
    parser.add_argument("--quick", action="store_true", help="one call shape per layout and method")
    args = parser.parse_args()
    started = time.perf_counter()

    from dara_kernels import METHODS

    if args.quick:
        calls = list(itertools.product(METHODS, (3,), (torch.float32,), LAYOUTS, (None,)))
    else:
        calls = list(itertools.product(METHODS, KS, REWARD_DTYPES, LAYOUTS, TOKEN_INPUTS))
    variants = {}
    for call in calls:
        for launch in recorded_launches(*call):
            variants.setdefault(launch, 0)
            variants[launch] += 1
    jobs = [(*variant, arch) for variant in variants for arch in args.arch]
    print(f"[triton-aot] {len(calls)} call shapes launch {len(variants)} distinct kernel variants; "
          f"compiling {len(jobs)} for sm_{', sm_'.join(map(str, args.arch))} with {args.jobs} processes",
          flush=True)

    rows = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for i, row in enumerate(pool.map(compile_variant, jobs, chunksize=4), 1):
            rows.append(row)
            if i % 20 == 0 or i == len(jobs):
                print(f"[triton-aot] {i}/{len(jobs)} compiled ({time.perf_counter() - started:.0f} s)", flush=True)

    failures = []
    print(f"{'kernel':<18} {'arch':<6} {'regs':>4} {'spill':>5} {'stack':>5} {'smem':>6}  variant")
    for row in sorted(rows, key=lambda r: (r["kernel"], r["arch"], r["variant"])):
        if "error" in row:
            failures.append(f"{row['kernel']} {row['arch']} {row['variant']}: {row['error']}")
            print(f"{row['kernel']:<18} {row['arch']:<6} COMPILE ERROR  {row['variant']}")
            continue
        print(f"{row['kernel']:<18} {row['arch']:<6} {row['registers']:>4} {row['spill_bytes']:>5} {row['stack']:>5} "
              f"{row['shared']:>6}  {row['variant']}")
        if row["spill_bytes"]:
            failures.append(f"{row['kernel']} {row['arch']} {row['variant']}: spills {row['spill_bytes']} bytes")
        if row["registers"] > REGISTER_BUDGET:
            failures.append(f"{row['kernel']} {row['arch']} {row['variant']}: {row['registers']} registers "
                            f"> budget {REGISTER_BUDGET}")
    if args.json:
        args.json.write_text(json.dumps({"register_budget": REGISTER_BUDGET, "rows": rows}, indent=1))
    compiled = [r for r in rows if "error" not in r]
    if compiled:
        worst = max(compiled, key=lambda r: r["registers"])
        print(f"[triton-aot] most registers: {worst['registers']} ({worst['kernel']} {worst['arch']} "
              f"{worst['variant']}); budget {REGISTER_BUDGET}")
    print(f"[triton-aot] {len(rows)} compiles in {time.perf_counter() - started:.0f} s, {len(failures)} failures")
    for failure in failures:
        print(f"[triton-aot] FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
