"""Where the tests run each backend: a backend that runs only on CUDA runs on the GPU when one is visible
(Triton compiled, as scripts/gpu_check.sh runs it), else on the CPU (Triton's interpreter; the CUDA backend
then reports itself unavailable); the others on the CPU."""
import torch

from dara_kernels import backends


def device_for(backend: str) -> str:
    needs_cuda = "cpu" not in backends.backend(backend).devices
    return "cuda" if needs_cuda and torch.cuda.is_available() else "cpu"
