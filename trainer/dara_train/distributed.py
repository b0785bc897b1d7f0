"""Process group and FSDP2 sharding: torchrun sets RANK/WORLD_SIZE; a plain
single-process run gets a one-rank group so the code path is the same."""
from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist


def init_distributed() -> tuple[int, int, torch.device]:
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                              LOCAL_RANK="0")
        # NCCL reduces CUDA tensors only; the rewards, lengths and the advantage op's accumulators are CPU
        # tensors (the tasks score on CPU), which gloo reduces beside it.
        dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, dist.get_world_size(), device


def decoder_layers(model) -> list:
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    if not layers:
        raise ValueError(f"found no *DecoderLayer modules in {type(model).__name__} to shard")
    return layers


def shard_policy(model, device: torch.device, mixed_precision: bool):
    """FSDP2: fully_shard per decoder layer, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model.to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs = {"mesh": mesh}
    if mixed_precision and device.type == "cuda":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_state_dict(model) -> dict:
    """Unsharded weights on every rank, for the rollout engine."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def all_sum(values: torch.Tensor) -> torch.Tensor:
    values = values.clone()
    if dist.get_world_size() > 1:
        dist.all_reduce(values)
    return values


def all_max(values: torch.Tensor) -> torch.Tensor:
    values = values.clone()
    if dist.get_world_size() > 1:
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values
