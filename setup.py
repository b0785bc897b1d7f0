"""Builds dara_kernels._C: the CPU kernels always, the CUDA binding when the
installed torch has CUDA and nvcc is present (or DARA_BUILD_CUDA=1 forces it).
Set DARA_NO_EXTENSION=1 for a pure-Python install (reference backend only)."""
import glob
import os
import sys

from setuptools import setup

# sm_80 (A100), sm_90 (H100/H200) and PTX that newer GPUs compile at load time.
DEFAULT_CUDA_ARCH_LIST = "8.0;9.0+PTX"


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

    sources = ["csrc/ops.cpp"] + sorted(glob.glob("csrc/cpu/*.cpp"))
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


ext_modules, cmdclass = extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
