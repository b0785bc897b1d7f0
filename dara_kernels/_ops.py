"""The compiled ops `torch.ops.dara.*`, their fake kernels for torch.compile,
and thin callers that take PreparedInputs."""
from __future__ import annotations

from typing import Optional

import torch

from .allocation import empty_outputs
from .options import AdvantageOptions
from .output import AdvantageOutput, output_from_kernel
from .validation import PreparedInputs
from .wire import accumulator_sizes, vector_columns

try:
    from . import _C  # registers torch.ops.dara.*

    EXTENSION_ERROR: Optional[str] = None
    # Whether _C registered CUDA kernels: a constant, so that choosing a backend inside torch.compile reads a
    # Python bool rather than asking the dispatcher (which Dynamo cannot trace) on every call.
    CUDA_KERNELS_COMPILED = bool(_C.built_with_cuda)
except ImportError as err:
    EXTENSION_ERROR = f"the compiled extension dara_kernels._C did not load ({err})"
    CUDA_KERNELS_COMPILED = False


def extension_available() -> bool:
    return EXTENSION_ERROR is None


def set_token_cache_bytes(max_bytes: int) -> int:
    """Bound the memory the CPU backend keeps between calls for its token-level
    output (default 256 MiB; 0 keeps none) and return the previous bound.

    The last freed `token_advantages` buffer is kept (one buffer, at most
    this many bytes) for the next call that fits it (capacity at most twice
    the request, so a response length that changes every step still reuses
    it): a fresh buffer of tens of MiB costs its page faults on every call,
    more than writing it."""
    if not extension_available():
        raise RuntimeError(f"set_token_cache_bytes needs the CPU backend: {EXTENSION_ERROR}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    return int(torch.ops.dara.set_token_cache_bytes(max_bytes))


def register_fakes(library: str) -> None:
    """The fake kernels torch.compile and FakeTensorMode run in place of `library`'s fused_advantage and
    accumulate (the schemas of wire.FUSED_ADVANTAGE_SCHEMA and ACCUMULATE_SCHEMA): output shapes only."""

    @torch.library.register_fake(f"{library}::fused_advantage")
    def _fused_advantage_fake(rewards, group_index, group_size, reward_weights, response_mask,
                              response_lengths, reward_bounds, accumulators, extrema, options):
        n, k = rewards.shape
        t = response_mask.shape[1] if response_mask is not None else None
        return tuple(empty_outputs(n, k, t, rewards.device).values())

    @torch.library.register_fake(f"{library}::accumulate")
    def _accumulate_fake(rewards, group_index, group_size, reward_weights, response_mask,
                         response_lengths, options):
        m, e = accumulator_sizes(rewards.shape[1], vector_columns(options, rewards.shape[1]))
        return (rewards.new_empty(m, dtype=torch.float64), rewards.new_empty(e, dtype=torch.float64))


if extension_available():
    register_fakes("dara")

    @torch.library.register_fake("dara::device_layout")
    def _device_layout_fake(group_index):
        n = group_index.shape[0]
        return tuple(group_index.new_empty(shape, dtype=torch.int64) for shape in ((n,), (n + 1,), ()))


def _layout_args(inputs: PreparedInputs):
    return (inputs.rewards, inputs.group_index, inputs.group_size, inputs.reward_weights,
            inputs.response_mask, inputs.response_lengths)


def kernel_accumulate(inputs: PreparedInputs, opts: AdvantageOptions, ops=None):
    return (ops or torch.ops.dara).accumulate.default(*_layout_args(inputs), opts.kernel_vectors[0])


def kernel_fused_advantage(inputs: PreparedInputs, opts: AdvantageOptions,
                           accumulators=None, extrema=None, ops=None) -> AdvantageOutput:
    result = (ops or torch.ops.dara).fused_advantage.default(
        *_layout_args(inputs), inputs.reward_bounds, accumulators, extrema,
        opts.kernel_vectors[1 if inputs.kernel_rejects_inf else 0])
    return output_from_kernel(result, inputs.response_mask is not None)


def kernel_runner(library: str = "dara"):
    """A backend's run(inputs, opts, reduce=None) on the compiled ops torch.ops.<library>: the CPU and CUDA
    backends' (dara), or a test harness's own build of the same ops under another library name. With
    reduce (distributed mode): the accumulate op, reduce, then the fused op with the reduced accumulators
    (it runs accumulate again for its per-group table, so each rank reads its rewards three times)."""
    def run(inputs: PreparedInputs, opts: AdvantageOptions, reduce=None) -> AdvantageOutput:
        ops = getattr(torch.ops, library)
        if reduce is None:
            return kernel_fused_advantage(inputs, opts, ops=ops)
        accumulators, extrema = reduce(*kernel_accumulate(inputs, opts, ops))
        return kernel_fused_advantage(inputs, opts, accumulators, extrema, ops)

    return run
