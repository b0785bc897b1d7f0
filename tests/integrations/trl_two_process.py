"""Launched by test_trl.py under torchrun with two CPU processes: DaraGRPOTrainer
keeps rewards on their process (no gather) and uses the op's process_group
mode; each process's advantages must equal its slice of the one-process result
on all rewards. Rank 0 writes a JSON verdict to argv[1]."""
import json
import os
import sys

import torch
import torch.distributed as dist
from test_trl import RecordingDara, run  # noqa: E402

import dara_kernels as dk


def main(out_path: str, workdir: str) -> None:
    from pathlib import Path

    trainer = run(RecordingDara, Path(workdir), advantage_method="gdpo", advantage_options={"preset": "trl"})
    world = dist.get_world_size()
    results = []
    for record in trainer.records:
        local = record["rewards"]
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        whole = dk.fused_advantage(torch.cat(gathered), group_size=4, method="gdpo", preset="trl",
                                   reward_weights=trainer.reward_weights)
        n = local.shape[0]
        expected = whole.advantages[dist.get_rank() * n:(dist.get_rank() + 1) * n]
        results.append({"local": bool(trainer._dara_local), "rows": n,
                        "max_diff": (record["advantages"] - expected).abs().max().item()})
    all_results = [None] * world
    dist.all_gather_object(all_results, results)
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps({"world": world, "ranks": all_results}))
    # Past this barrier every collective is done and the verdict is on disk.
    # Interpreter teardown with gloo's threads still alive aborted the process
    # now and then ("terminate called without an active exception"), and an
    # explicit destroy_process_group once hung: leave without teardown.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
