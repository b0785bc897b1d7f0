"""Gates nvcc's resource report for csrc/cuda's kernels: prints each kernel instantiation's registers, stack,
spills, shared memory and resident blocks per SM, and exits 1 on any spill, on a block over the 48 KiB of
shared memory a launch takes without cudaFuncSetAttribute, or when a kernel's registers, shared memory or
threads leave fewer resident blocks per SM than its own constant in csrc/cuda/launch.h
(BLOCKS_PER_MULTIPROCESSOR), which grid_blocks sizes its grid for.

    python3 scripts/cuda_resources.py [--markdown] REPORT...

A REPORT is what `nvcc --resource-usage` (ptxas's info lines) printed. scripts/check_cuda_compiles.sh runs
this on its compiles. Standard library only: CI runs it before any environment with torch exists."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import pathlib
import re
import sys
import types
from typing import Callable, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAUNCH_HEADER = ROOT / "csrc" / "cuda" / "launch.h"
TABLES_HEADER = ROOT / "csrc" / "core" / "generated_tables.h"


@dataclasses.dataclass(frozen=True)
class Multiprocessor:
    """One SM's limits. Registers, threads, blocks and shared memory: the CUDA C++ Programming Guide's
    "Technical Specifications per Compute Capability" table, columns 8.0 (A100) and 9.0 (H100). The
    allocation units and sub-partitions: the toolkit's cuda_occupancy.h, the occupancy calculator's source."""
    shared: int                # bytes of shared memory an SM's blocks share, at the largest carveout
    registers: int = 65536     # 32-bit registers
    register_unit: int = 256   # a warp's registers are allocated in multiples of this
    sub_partitions: int = 4    # each holds a quarter of the registers and only whole warps
    max_registers: int = 255   # a thread's
    threads: int = 2048
    blocks: int = 32
    shared_unit: int = 128     # a block's shared memory is allocated in multiples of this
    reserved_shared: int = 1024  # the driver's, for each block


MULTIPROCESSORS = {"sm_80": Multiprocessor(shared=164 * 1024), "sm_90": Multiprocessor(shared=228 * 1024)}
# The shared memory a block may take without cudaFuncSetAttribute (the same table: 48 KB), which no launch sets.
DEFAULT_BLOCK_SHARED = 48 * 1024
WARP = 32

# Itanium ABI codes of the builtin types a kernel's template arguments may be.
BUILTIN_TYPES = {"b": "bool", "c": "char", "d": "double", "f": "float", "i": "int", "j": "unsigned int",
                 "l": "long", "m": "unsigned long", "x": "long long", "y": "unsigned long long"}


@dataclasses.dataclass
class Function:
    """A function ptxas reported: a kernel (entry) or a device function it calls, which has no registers
    or shared memory of its own in the report."""
    mangled: str
    arch: str
    entry: bool
    registers: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    static_shared: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def demangled(mangled: str) -> tuple[str, tuple[str, ...]]:
    """A kernel's own name and template arguments ("accumulate_kernel", ("8", "float")) out of its mangled
    name, for the names csrc/cuda's kernels have: a nested or plain name whose template arguments are integer
    literals and builtin types. Any other name comes back whole, with no arguments."""
    start = re.match(r"_Z(N?)", mangled)
    if not start:
        return mangled, ()
    nested, at, name, args = bool(start.group(1)), start.end(), mangled, ()
    while length := re.match(r"\d+", mangled[at:]):
        at += len(length.group())
        name, args = mangled[at:at + int(length.group())], ()
        at += int(length.group())
        if mangled.startswith("I", at):
            parsed = template_args(mangled, at + 1)
            if parsed is None:
                return mangled, ()
            args, at = parsed
        if not nested:
            return name, args
    return (name, args) if mangled.startswith("E", at) else (mangled, ())


def template_args(mangled: str, at: int) -> Optional[tuple[tuple[str, ...], int]]:
    """The arguments from `at` (past the I) to their E, and the position past it; None for any other kind."""
    args = []
    while at < len(mangled) and mangled[at] != "E":
        literal = re.match(r"L([a-z])(n?)(\d+)E", mangled[at:])
        if literal:
            kind, negative, digits = literal.groups()
            args.append(("true" if digits != "0" else "false") if kind == "b" else ("-" if negative else "") + digits)
            at += literal.end()
        elif mangled[at] in BUILTIN_TYPES:
            args.append(BUILTIN_TYPES[mangled[at]])
            at += 1
        else:
            return None
    return tuple(args), at + 1


def readable(mangled: str) -> str:
    name, args = demangled(mangled)
    return f"{name}<{', '.join(args)}>" if args else name


def parse(report: str) -> list[Function]:
    """Every function in ptxas's info lines, in report order: each kernel's entry line, the properties line
    of it and of each device function it calls (stack frame, spills), and the kernel's "Used" line."""
    functions: list[Function] = []
    arch, kernel, described = "", None, None
    for line in report.splitlines():
        if entry := re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line):
            arch = entry.group(2)
            kernel = Function(entry.group(1), arch, entry=True)
            functions.append(kernel)
        elif properties := re.search(r"Function properties for (\S+)", line):
            if kernel is not None and properties.group(1) == kernel.mangled:
                described = kernel
            else:
                described = Function(properties.group(1), arch, entry=False)
                functions.append(described)
        elif (frame := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                                 line)) and described:
            described.stack, described.spill_stores, described.spill_loads = map(int, frame.groups())
        elif (used := re.search(r"Used (\d+) registers", line)) and kernel:
            kernel.registers = int(used.group(1))
            shared = re.search(r"(\d+) bytes smem", line)
            kernel.static_shared = int(shared.group(1)) if shared else 0
    return functions


def round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def resident_blocks(registers: int, threads: int, shared: int, sm: Multiprocessor) -> tuple[int, str]:
    """How many blocks of `threads` threads, each thread with `registers` registers and each block with `shared`
    bytes of shared memory, an SM holds at once, and the resource that sets it (cuda_occupancy.h's
    cudaOccMaxActiveBlocksPerMultiprocessor, without partitioned global caching)."""
    warps = -(-threads // WARP)
    warp_registers = round_up(registers * WARP, sm.register_unit)
    if registers > sm.max_registers:
        by_registers = 0
    elif warp_registers == 0:
        by_registers = sm.blocks
    else:
        by_registers = sm.registers // sm.sub_partitions // warp_registers * sm.sub_partitions // warps
    limits = {
        "registers": by_registers,
        "threads": sm.threads // threads,
        "shared memory": sm.shared // round_up(shared + sm.reserved_shared, sm.shared_unit),
        "blocks": sm.blocks,
    }
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


@dataclasses.dataclass(frozen=True)
class Launch:
    """launch.h's and generated_tables.h's numbers the gate holds the kernels to."""
    warps_per_block: int
    blocks_per_multiprocessor: dict[str, int]  # each constant's value, by its name in BLOCKS_PER_MULTIPROCESSOR
    max_rewards: int  # the most rewards the any-K kernels (K = 0) take: kMaxCudaRewards


def header_constant(path: pathlib.Path, name: str) -> int:
    match = re.search(rf"constexpr int {name} = (\d+);", path.read_text())
    if not match:
        raise SystemExit(f"[dara] {path} has no `constexpr int {name} = N;`")
    return int(match.group(1))


def launch_constants() -> Launch:
    return Launch(header_constant(LAUNCH_HEADER, "kWarpsPerBlock"),
                  {name: header_constant(LAUNCH_HEADER, name) for name in BLOCKS_PER_MULTIPROCESSOR.values()},
                  header_constant(TABLES_HEADER, "kMaxCudaRewards"))


def load_wire() -> types.ModuleType:
    """dara_kernels/wire.py, which needs only the standard library, without the package's __init__, which
    imports torch (as scripts/generate_wire.py loads it)."""
    if "dara_kernels" not in sys.modules:
        package = types.ModuleType("dara_kernels")
        package.__path__ = [str(ROOT / "dara_kernels")]
        sys.modules["dara_kernels"] = package
    return importlib.import_module("dara_kernels.wire")


def accumulate_shared_bytes(wire: types.ModuleType, k: int, warps: int) -> int:
    """launch.h's accumulate_shared_bytes for K rewards and their most combined columns: each warp's
    accumulators and extrema, in doubles."""
    return 8 * warps * sum(wire.accumulator_sizes(k, wire.max_combined_columns(k)))


# Each kernel's dynamic shared memory a block for K rewards and the block's warps (launch_accumulate,
# launch_apply); a kernel missing here fails the gate until it is added.
DynamicShared = Callable[[types.ModuleType, int, int], int]
DYNAMIC_SHARED: dict[str, DynamicShared] = {
    "accumulate_kernel": accumulate_shared_bytes,
    "apply_kernel": lambda wire, k, warps: 0,
}
# Each kernel's launch.h constant: the resident blocks per SM its grid and __launch_bounds__ take. Each kernel
# has its own, as their registers differ; a kernel missing here fails the gate until it is added.
BLOCKS_PER_MULTIPROCESSOR = {
    "accumulate_kernel": "kAccumulateBlocksPerMultiprocessor",
    "apply_kernel": "kApplyBlocksPerMultiprocessor",
}


@dataclasses.dataclass(frozen=True)
class Row:
    kernel: Function
    dynamic_shared: int  # at the instantiation's largest K
    blocks: int
    limiter: str
    constant: str  # launch.h's resident blocks per SM for this kernel (BLOCKS_PER_MULTIPROCESSOR)

    @property
    def shared(self) -> int:
        return self.kernel.static_shared + self.dynamic_shared


def largest_rewards(args: tuple[str, ...], launch: Launch) -> int:
    """The most rewards an instantiation takes: its K (the first template argument), or the limit for K = 0."""
    k = int(args[0])
    return k if k > 0 else launch.max_rewards


def rows_of(functions: list[Function], launch: Launch, wire: types.ModuleType) -> tuple[list[Row], list[str]]:
    """Each kernel's row, and the kernels the gate cannot size."""
    rows, unknown = [], []
    threads = launch.warps_per_block * WARP
    for kernel in (f for f in functions if f.entry):
        name, args = demangled(kernel.mangled)
        if name not in DYNAMIC_SHARED or name not in BLOCKS_PER_MULTIPROCESSOR or not args or \
                kernel.arch not in MULTIPROCESSORS:
            unknown.append(f"{readable(kernel.mangled)} for {kernel.arch}")
            continue
        dynamic = DYNAMIC_SHARED[name](wire, largest_rewards(args, launch), launch.warps_per_block)
        blocks, limiter = resident_blocks(kernel.registers, threads, kernel.static_shared + dynamic,
                                          MULTIPROCESSORS[kernel.arch])
        rows.append(Row(kernel, dynamic, blocks, limiter, BLOCKS_PER_MULTIPROCESSOR[name]))
    return rows, unknown


def violations(functions: list[Function], rows: list[Row], launch: Launch) -> list[str]:
    found = [f"{readable(f.mangled)} for {f.arch} spills: {f.spill_stores} bytes stored, {f.spill_loads} loaded"
             for f in functions if f.spills]
    for row in rows:
        name = f"{readable(row.kernel.mangled)} for {row.kernel.arch}"
        if row.shared > DEFAULT_BLOCK_SHARED:
            found.append(f"{name} takes {row.shared} bytes of shared memory a block, over the {DEFAULT_BLOCK_SHARED} "
                         "a launch takes without cudaFuncSetAttribute")
        wanted = launch.blocks_per_multiprocessor[row.constant]
        if row.blocks < wanted:
            found.append(f"{name}: an SM holds at most {row.blocks} of its blocks of {launch.warps_per_block * WARP} "
                         f"threads, limited by {row.limiter} ({row.kernel.registers} registers a thread, {row.shared} "
                         f"bytes of shared memory a block); launch.h's {row.constant} is {wanted}")
    return found


COLUMNS = ("kernel", "arch", "registers", "stack B", "spill B (st/ld)", "shared B (static + dynamic)",
           "blocks/SM (limit)")


def table(rows: list[Row], markdown: bool) -> str:
    cells = [(readable(r.kernel.mangled), r.kernel.arch, str(r.kernel.registers), str(r.kernel.stack),
              f"{r.kernel.spill_stores}/{r.kernel.spill_loads}",
              f"{r.kernel.static_shared} + {r.dynamic_shared}", f"{r.blocks} ({r.limiter})") for r in rows]
    if markdown:
        lines = [COLUMNS, ("---",) * len(COLUMNS), *cells]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
    widths = [max(len(line[i]) for line in (COLUMNS, *cells)) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in (COLUMNS, *cells))


def sort_key(row: Row) -> tuple:
    name, args = demangled(row.kernel.mangled)
    return name, int(args[0]), args[1:], row.kernel.arch


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=pathlib.Path, help="nvcc --resource-usage output")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args(argv)
    functions = [f for report in args.reports for f in parse(report.read_text())]
    launch = launch_constants()
    rows, unknown = rows_of(functions, launch, load_wire())
    print(table(sorted(rows, key=sort_key), args.markdown))
    failures = violations(functions, rows, launch)
    failures += [f"{name}: no dynamic shared size, launch.h constant or SM limits known (DYNAMIC_SHARED, "
                 "BLOCKS_PER_MULTIPROCESSOR, MULTIPROCESSORS)" for name in unknown]
    if not rows:
        failures.append("no kernel in the report: was it compiled with --resource-usage?")
    for failure in failures:
        print(f"[dara] resource gate FAILED: {failure}", file=sys.stderr)
    if not failures:
        wanted = ", ".join(f"{name} = {blocks}" for name, blocks in launch.blocks_per_multiprocessor.items())
        print(f"[dara] resource gate ok: {len(rows)} kernels, no spill, resident blocks per SM at least launch.h's "
              f"({wanted})", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
