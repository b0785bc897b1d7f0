"""Builds the emulated CUDA extension: csrc/cuda's kernels compiled by g++ as
C++ (-x c++) under emulated_cuda.h, the CUDA backend's host code
(csrc/cuda/host_call.cpp), the emulator and its binding, all under
AddressSanitizer and UndefinedBehaviorSanitizer. Linked against
dara_kernels._C for the group layout (csrc/device_layout.cpp), which the CUDA
binding shares. Each object is cached in build/cuda_emulation/objects under a
hash of its source, every header, the flags, the compiler and torch, and the
library under a hash of its objects; it loads only in a process that starts
with ASan's runtime (`asan_environment`)."""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils import cpp_extension

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
CACHE = ROOT / "build" / "cuda_emulation"
LIBRARY = "dara_emulated.so"
COMPILER = os.environ.get("CXX", "g++")

# Compiled as C++ under the emulation's force-included header: the CUDA kernels and the faulty test kernels.
KERNELS = (*sorted((ROOT / "csrc" / "cuda").glob("*.cu")), HERE / "faulty_kernels.cu")
HOST = (ROOT / "csrc" / "cuda" / "host_call.cpp", HERE / "emulated_runtime.cpp", HERE / "binding.cpp")
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-O1", "-g"]
# The nvcc check's host warnings (scripts/check_cuda_compiles.sh), here for the device code too.
WARNINGS = ["-Wall", "-Wextra", "-Werror"]


class BuildError(RuntimeError):
    pass


def cuda_include() -> pathlib.Path:
    """The toolkit's headers: the kernels take dim3, cudaError_t and the half types from the real ones."""
    homes = [os.environ.get("CUDA_HOME"), cpp_extension.CUDA_HOME, "/usr/local/cuda"]
    for home in filter(None, homes):
        include = pathlib.Path(home) / "include"
        if (include / "cuda_runtime_api.h").exists() and (include / "cuda_fp16.h").exists():
            return include
    raise BuildError(f"no CUDA headers (cuda_runtime_api.h, cuda_fp16.h) under any of {homes}: set CUDA_HOME")


def compile_flags() -> list[str]:
    includes = [f"-isystem{path}" for path in (*cpp_extension.include_paths(), str(cuda_include()))]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return ["-std=c++20", "-fPIC", *SANITIZERS, *WARNINGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *includes]


def link_flags() -> list[str]:
    import dara_kernels._C

    torch_lib = cpp_extension.library_paths()[0]
    dara = pathlib.Path(dara_kernels._C.__file__)
    # -Bsymbolic-functions: the library's calls of its own cuda* definitions stay its own beside a CUDA torch,
    # which loads the real libcudart into the global scope.
    return ["-shared", "-Wl,-Bsymbolic-functions", *SANITIZERS,
            f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", f"-Wl,-rpath,{torch_lib}",
            f"-L{dara.parent}", f"-l:{dara.name}", f"-Wl,-rpath,{dara.parent}"]


def _digest(*parts) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _headers() -> bytes:
    """Every header a source may include, by path and content: a change to one rebuilds every object."""
    paths = sorted(p for p in (*ROOT.glob("csrc/**/*"), *HERE.glob("*")) if p.suffix in (".h", ".cuh"))
    return b"".join(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() for p in paths)


def _compile(source: pathlib.Path, obj: pathlib.Path) -> None:
    as_kernel = ["-x", "c++", "-include", str(HERE / "emulated_cuda.h")] if source in KERNELS else []
    # Relative to the root, so that the emulation's errors name csrc/cuda/accumulate.cu:123.
    command = [COMPILER, *as_kernel, *compile_flags(), "-c", str(source.relative_to(ROOT)), "-o", str(obj)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"{' '.join(command)}\n{done.stderr}")


def _object(source: pathlib.Path, key: str) -> pathlib.Path:
    """source's object under `key` (its source, the headers, the flags), compiled unless cached."""
    obj = CACHE / "objects" / f"{source.stem}-{key}.o"
    if not obj.exists():
        obj.parent.mkdir(parents=True, exist_ok=True)
        partial = obj.with_suffix(f".{os.getpid()}.partial")
        _compile(source, partial)
        partial.replace(obj)
    return obj


def build() -> pathlib.Path:
    """The library's path, rebuilt from the objects whose sources, headers or flags changed."""
    version = subprocess.run([COMPILER, "--version"], capture_output=True, text=True, check=True).stdout
    shared = (_headers(), *compile_flags(), version, torch.__version__)
    sources = (*KERNELS, *HOST)
    keys = [_digest(source.relative_to(ROOT), source.read_bytes(), *shared) for source in sources]
    library = CACHE / f"{pathlib.Path(LIBRARY).stem}-{_digest(*keys, *link_flags())}.so"
    if library.exists():
        return library
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        objects = list(pool.map(_object, sources, keys))
    partial = library.with_suffix(f".{os.getpid()}.partial")
    command = [COMPILER, *map(str, objects), *link_flags(), "-o", str(partial)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"{' '.join(command)}\n{done.stderr}")
    partial.replace(library)
    return library


def _runtime(name: str) -> str:
    path = subprocess.run([COMPILER, f"-print-file-name={name}"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if not os.path.isabs(path):
        raise BuildError(f"{COMPILER} has no {name} (it printed {path!r})")
    return path


def asan_environment() -> dict[str, str]:
    """The environment of a process that loads the library. python is not instrumented, so ASan's runtime
    must come first, and libstdc++ with it: ASan's __cxa_throw wrapper finds the real one only in a library
    loaded before it (without, the first C++ exception stops the process). No leak report: CPython and torch
    keep their allocations to the end."""
    preload = " ".join(_runtime(name) for name in ("libasan.so", "libstdc++.so"))
    return {**os.environ, "LD_PRELOAD": preload, "ASAN_OPTIONS": "detect_leaks=0",
            "UBSAN_OPTIONS": "print_stacktrace=1"}
