"""A CPU emulation of the CUDA execution model that runs csrc/cuda for tests/test_cuda_emulation.py; not shipped."""
