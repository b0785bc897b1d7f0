"""The GPU paths traced without a GPU: fake CUDA tensors (FakeTensorMode)
through torch.compile(fullgraph=True) and through eager calls with
validate=False, for backend="cuda", "triton" and "auto", and the Triton
driver's own host code with its launches recorded instead of run.

Under FakeTensorMode an op runs its fake kernel, so what is traced is the
Python between the caller and the kernels: backend choice, input
preparation, distributed mode's stages and the Triton driver. What it cannot
reach (the kernels, Triton's launch, the CUDA driver):
docs/architecture.md#the-gpu-paths-traced-without-a-gpu.

These run in the main suite (CPU torch: the CUDA kernels are not built, so
the cuda backend's flag is set for the trace; its fake kernel is what runs
either way) and in scripts/check_torch_build.sh cuda, against the CUDA build."""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import dara_kernels as dk
from dara_kernels import _ops, backends
from dara_kernels.options import resolve_options
from dara_kernels.validation import prepare_inputs

pytestmark = pytest.mark.skipif(not dk.extension_available(), reason="the ops and their fake kernels need _C")

N, K, T, G = 64, 3, 10, 8
LAYOUTS = ("group_size", "group_index+mask")
# Reading a device value on the host: each is a synchronisation (and an error in CUDA-graph capture).
HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default,
              torch.ops.aten.item.default}


class HostTraffic(TorchDispatchMode):
    """Every op that reads a value on the host or touches a CPU tensor, by name."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            self.seen.append(f"{func} reads a device value on the host")
        out = func(*args, **(kwargs or {}))
        devices = {t.device.type for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)}
        if "cpu" in devices:
            self.seen.append(f"{func} on a CPU tensor")
        return out


def fake_inputs(layout: str, device: str = "cuda") -> dict:
    inputs = {"rewards": torch.empty(N, K, device=device)}
    if layout == "group_size":
        inputs["group_size"] = G
    else:
        inputs["group_index"] = torch.empty(N, dtype=torch.int64, device=device)
        inputs["response_mask"] = torch.empty(N, T, device=device)
    return inputs


@pytest.fixture
def traceable(monkeypatch):
    """backend="cuda" available for the trace where _C has no CUDA kernels (the main suite's CPU torch)."""
    if not _ops.CUDA_KERNELS_COMPILED:
        monkeypatch.setattr(_ops, "CUDA_KERNELS_COMPILED", True)
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def call(backend: str):
    def run(rewards, group_size=None, group_index=None, response_mask=None):
        return dk.fused_advantage(rewards, group_size, group_index=group_index, response_mask=response_mask,
                                  backend=backend, validate=False)

    return run


def distributed_stages(backend: str):
    """Distributed mode's stages as backends run them (accumulate, the reduce, fused_advantage with the
    reduced sums), with the reduce the identity: the collectives themselves need a process group."""
    opts = resolve_options("dara", None)

    def run(rewards, group_size=None, group_index=None, response_mask=None):
        inputs = prepare_inputs(rewards, group_size=group_size, group_index=group_index, reward_weights=None,
                                response_mask=response_mask, response_lengths=None, reward_bounds=None,
                                nan_policy=opts.nan_policy, batch_norm=opts.batch_norm, validate=False,
                                distributed=True)
        return backends.backend(backend).run(inputs, opts, lambda accumulators, extrema: (accumulators, extrema))

    return run


CASES = [(f"{backend} {layout}", call(backend), layout) for backend in ("cuda", "triton", "auto") for layout in LAYOUTS]
CASES += [(f"{backend} distributed stages", distributed_stages(backend), "group_index+mask")
          for backend in ("cuda", "triton")]


@pytest.mark.parametrize("label, fn, layout", CASES, ids=[c[0] for c in CASES])
def test_compiles_without_a_graph_break(traceable, label, fn, layout):
    with FakeTensorMode():
        inputs = fake_inputs(layout)
        out = torch.compile(fn, fullgraph=True, backend="aot_eager")(**inputs)
    assert out.advantages.device.type == "cuda" and out.advantages.shape == (N,), label
    assert (out.token_advantages is None) == ("response_mask" not in inputs), label


@pytest.mark.parametrize("label, fn, layout", CASES, ids=[c[0] for c in CASES])
def test_eager_call_reads_nothing_on_the_host(traceable, label, fn, layout):
    traffic = HostTraffic()
    with FakeTensorMode():
        inputs = fake_inputs(layout)
        with traffic:
            out = fn(**inputs)
    assert traffic.seen == [], label
    assert out.advantages.device.type == "cuda", label


class DeviceGuards:
    """torch.cuda.device as a recorder: the device each launch ran under (a fake tensor has no real device
    to make current)."""

    def __init__(self):
        self.current: list[int] = []

    @contextlib.contextmanager
    def device(self, device):
        self.current.append(torch.device(device).index)
        try:
            yield
        finally:
            self.current.pop()


class Properties:
    multi_processor_count = 132


@pytest.mark.parametrize("stage", ["fused_advantage", "accumulate"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_triton_driver_on_the_inputs_device_without_host_traffic(monkeypatch, layout, stage):
    """The driver's host code (group layout, allocation, argument binding) on fake tensors on cuda:1 while
    another device is current, its launches recorded: none reads or copies a host value, and each launches
    with the inputs' device current (Triton launches on the current device)."""
    pytest.importorskip("triton")
    from dara_kernels.triton import fused

    guards = DeviceGuards()
    monkeypatch.setattr(torch.cuda, "device", guards.device)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Properties())
    launched = []

    def record(kernel, grid, *args, **constexprs):
        launched.append((kernel.fn.__name__, guards.current[-1] if guards.current else None))

    opts = resolve_options("dara", None)
    traffic = HostTraffic()
    with FakeTensorMode():
        inputs = fake_inputs(layout, "cuda:1")
        mask = inputs.get("response_mask")
        args = (inputs["rewards"], inputs.get("group_index"), inputs.get("group_size", 0),
                torch.ones(K, dtype=torch.float64, device="cuda:1"), mask, None)
        with traffic:
            if stage == "accumulate":
                fused.accumulate(*args, opts.kernel_vectors[0], run=record)
            else:
                fused.fused_advantage(*args, None, None, None, opts.kernel_vectors[0], run=record)
    assert traffic.seen == []
    kernels = ["accumulate_kernel"] + (["finalize_kernel", "apply_kernel"] if stage == "fused_advantage" else [])
    assert launched == [(kernel, 1) for kernel in kernels]


def test_a_second_fake_mode_traces_the_same_call():
    """Nothing made in one call reaches the next: a tensor kept between calls (the default reward weights
    were) belongs to the first call's fake mode, and a second (torch.export, another compile) rejects it."""
    for _ in range(2):
        with FakeTensorMode():
            out = dk.fused_advantage(torch.empty(N, K), G, backend="cpu", validate=False)
        assert out.advantages.shape == (N,)
