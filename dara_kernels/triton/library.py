"""The Triton backend as ops: dara_triton::fused_advantage and
dara_triton::accumulate, with the schemas of the compiled dara:: ops
(wire.FUSED_ADVANTAGE_SCHEMA, ACCUMULATE_SCHEMA) and the same fake kernels.

As ops, torch.compile keeps a call in its graph without tracing the driver's
Python (device queries, the launcher), and every kernel backend runs through
one caller, _ops.kernel_runner, in distributed mode too. The implementations
(triton/fused.py) import triton only when first called. CPU tensors reach
them only under the Triton interpreter (the backend's record says when)."""
from __future__ import annotations

import torch

from .. import _ops
from ..wire import ACCUMULATE_SCHEMA, FUSED_ADVANTAGE_SCHEMA

LIBRARY = "dara_triton"


def _fused_advantage(*args):
    from .fused import fused_advantage

    return fused_advantage(*args)


def _accumulate(*args):
    from .fused import accumulate

    return accumulate(*args)


_library = torch.library.Library(LIBRARY, "DEF")
_library.define(FUSED_ADVANTAGE_SCHEMA)
_library.define(ACCUMULATE_SCHEMA)
for _key in ("CUDA", "CPU"):
    _library.impl("fused_advantage", _fused_advantage, _key)
    _library.impl("accumulate", _accumulate, _key)
_ops.register_fakes(LIBRARY)
