"""Builds dara_kernels._C: the CPU kernels always, the CUDA binding when the
installed torch has CUDA and nvcc is present (or DARA_BUILD_CUDA=1 forces it;
DARA_BUILD_CUDA=0 builds the CPU kernels only).
Set DARA_NO_EXTENSION=1 for a pure-Python install (reference backend only).
Each check below stops the build with what it found and the way out, before
setuptools or torch would stop it with a traceback."""
import glob
import os
import re
import subprocess
import sys

import setuptools
from setuptools import setup

# pyproject.toml's project.license is an SPDX expression (PEP 639), which setuptools reads from 77 on.
MIN_SETUPTOOLS = 77
# The torch releases CI builds against, oldest and newest (major, minor); pyproject.toml's
# dependency declares the same range, and tests/test_setup_checks.py keeps the two equal.
SUPPORTED_TORCH = ((2, 8), (2, 15))
# sm_80 (A100), sm_90 (H100/H200) and PTX that newer GPUs compile at load time.
DEFAULT_CUDA_ARCH_LIST = "8.0;9.0+PTX"


def release(version):
    """(major, minor) of a version string such as '2.11.0+cu130' or '13.0'."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def check_setuptools(version):
    if release(version)[0] < MIN_SETUPTOOLS:
        raise SystemExit(
            f"dara-kernels: setuptools {version} cannot read this package's pyproject.toml (its license is an "
            f"SPDX expression, read from setuptools {MIN_SETUPTOOLS} on). A Python 3.10 or 3.11 venv starts with "
            "setuptools 65, and torch 2.8 to 2.12 keep it. Upgrade it (below 82, which torch 2.11 and 2.12 "
            f'require), then build again: pip install "setuptools>={MIN_SETUPTOOLS},<82"')


def check_torch(version):
    """pip installs the package's torch requirement after the build: outside the range it would replace
    the torch the extension was just compiled against."""
    (oldest, newest), found = SUPPORTED_TORCH, release(version)
    if not oldest <= found <= newest:
        supported = f"torch {oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}"
        raise SystemExit(
            f"dara-kernels supports {supported} and compiles against the installed one, which is torch "
            f"{version}. Install a supported torch first (CPU: pip install torch==2.13.0), then: "
            "pip install --no-build-isolation .")


def toolkit_cuda_version(cuda_home):
    """The CUDA release of the toolkit's nvcc ('13.0'), as torch reads it; None without an nvcc that says."""
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if not os.path.exists(nvcc):
        return None  # torch's own check says where it looked
    banner = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release (\d+\.\d+)", banner)
    return found.group(1) if found else None


def check_cuda_toolkit(torch_version, torch_cuda, toolkit_cuda, cuda_home):
    """torch refuses to compile CUDA code across CUDA major versions (a minor difference only warns)."""
    if toolkit_cuda is None or release(torch_cuda)[0] == release(toolkit_cuda)[0]:
        return
    raise SystemExit(
        f"dara-kernels: torch {torch_version} is built for CUDA {torch_cuda}, but the toolkit's nvcc "
        f"({os.path.join(cuda_home, 'bin', 'nvcc')}) is CUDA {toolkit_cuda}, and torch cannot compile CUDA code "
        "across major versions. Either build the CPU kernels only (DARA_BUILD_CUDA=0 pip install "
        "--no-build-isolation .; on a GPU the Triton backend still runs), or point CUDA_HOME at a CUDA "
        f"{release(torch_cuda)[0]}.x toolkit, or install a torch built for CUDA {release(toolkit_cuda)[0]}.x.")


def check_toolkit_headers(cuda_home, cuda_inc_path):
    """Without CUDA_HOME torch takes the folder above the nvcc on PATH, which has no headers when that nvcc
    is a link or a wrapper script (/usr/local/bin/nvcc): the build would stop at the first CUDA include."""
    folders = [os.path.join(cuda_home, "include")] + ([cuda_inc_path] if cuda_inc_path else [])
    if any(os.path.exists(os.path.join(folder, "cuda_runtime.h")) for folder in folders):
        return
    raise SystemExit(
        f"dara-kernels: the CUDA toolkit torch found at {cuda_home} has no include/cuda_runtime.h (torch reads "
        "CUDA_HOME, else takes the folder above the nvcc on PATH). Set CUDA_HOME to the toolkit's root, the "
        "folder with bin/nvcc and include/ (often /usr/local/cuda), or build the CPU kernels only: "
        "DARA_BUILD_CUDA=0 pip install --no-build-isolation .")


def default_gpu_architectures(torch):
    """torch targets the visible GPUs when TORCH_CUDA_ARCH_LIST is unset, and
    crashes when there are none (a GPU-less build machine)."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST") or torch.cuda.device_count() > 0:
        return
    os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_CUDA_ARCH_LIST
    print(f"dara-kernels: no GPU visible and TORCH_CUDA_ARCH_LIST unset; building for {DEFAULT_CUDA_ARCH_LIST}")


def extensions():
    if os.environ.get("DARA_NO_EXTENSION") == "1":
        return [], {}
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as err:
        raise SystemExit(
            "dara-kernels compiles against the torch you already have. Install torch first "
            "(CPU: pip install torch==2.13.0), then: pip install --no-build-isolation .\n"
            "For a pure-Python install (reference backend only) set DARA_NO_EXTENSION=1."
        ) from err
    check_torch(torch.__version__)

    sources = ["csrc/ops.cpp", "csrc/device_layout.cpp"] + sorted(glob.glob("csrc/cpu/*.cpp"))
    # -fopenmp: at::parallel_for's OpenMP loop is compiled into the extension.
    # The kernels read no floating-point exception flags nor errno, so loops
    # with selects between doubles may run in SIMD lanes (both sides computed).
    cxx = ["-O3", "-std=c++20", "-fopenmp", "-fno-trapping-math", "-fno-math-errno"]
    if sys.platform == "darwin":
        cxx.remove("-fopenmp")
    flags = {"cxx": cxx}
    build_cuda = os.environ.get("DARA_BUILD_CUDA")
    use_cuda = (build_cuda == "1") or (
        build_cuda is None and torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None
    )
    if use_cuda:
        if torch.version.cuda is None or cpp_extension.CUDA_HOME is None:
            raise SystemExit(
                f"DARA_BUILD_CUDA=1 needs a CUDA torch and the CUDA toolkit: torch {torch.__version__} "
                f"(CUDA {torch.version.cuda}), CUDA_HOME {cpp_extension.CUDA_HOME}.")
        check_cuda_toolkit(torch.__version__, torch.version.cuda, toolkit_cuda_version(cpp_extension.CUDA_HOME),
                           cpp_extension.CUDA_HOME)
        check_toolkit_headers(cpp_extension.CUDA_HOME, os.environ.get("CUDA_INC_PATH"))
        default_gpu_architectures(torch)
        sources += sorted(glob.glob("csrc/cuda/*.cu")) + sorted(glob.glob("csrc/cuda/*.cpp"))
        flags["nvcc"] = ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo"]
        flags["cxx"] = cxx + ["-DDARA_WITH_CUDA"]
        ext = cpp_extension.CUDAExtension
    else:
        ext = cpp_extension.CppExtension
    module = ext(
        "dara_kernels._C",
        sources,
        extra_compile_args=flags,
        extra_link_args=[] if sys.platform == "darwin" else ["-fopenmp"],
        py_limited_api=False,
    )
    return [module], {"build_ext": cpp_extension.BuildExtension}


# setuptools runs this file as __main__; tests/test_setup_checks.py loads it under another name to call the checks.
if __name__ == "__main__":
    check_setuptools(setuptools.__version__)
    ext_modules, cmdclass = extensions()
    setup(ext_modules=ext_modules, cmdclass=cmdclass)
