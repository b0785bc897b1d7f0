"""Checkpoints with torch.distributed.checkpoint: sharded policy and optimizer
state, plus each rank's RNG state, data position and step."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return output_dir / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(output_dir: Path, step: int, model, optimizer) -> Path:
    """`step` is the number of completed steps."""
    path = checkpoint_dir(output_dir, step)
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path))
    rank = dist.get_rank()
    torch.save({"rng": torch.get_rng_state(), "step": step, "data_position": step},
               path / f"trainer_state_rank{rank}.pt")
    dist.barrier()
    if rank == 0:
        (path / "COMPLETE").write_text(json.dumps({"step": step}))
    return path


def latest_checkpoint(output_dir: Path) -> Optional[Path]:
    done = sorted(p.parent for p in (output_dir / "checkpoints").glob("step_*/COMPLETE"))
    return done[-1] if done else None


def load_checkpoint(path: Path, model, optimizer) -> int:
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    extra = torch.load(path / f"trainer_state_rank{dist.get_rank()}.pt", weights_only=False)
    torch.set_rng_state(extra["rng"])
    return int(extra["step"])
