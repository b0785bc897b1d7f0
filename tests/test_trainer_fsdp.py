"""A two-process FSDP2 (gloo) update equals the one-process update."""
import os
import tempfile

import pytest
import torch
import torch.multiprocessing as mp

pytest.importorskip("transformers")


def make_batch():
    from dara_train.ppo import TrainBatch

    gen = torch.Generator().manual_seed(0)
    n, s = 8, 10
    ids = torch.randint(3, 20, (n, s), generator=gen)
    attention = torch.ones(n, s, dtype=torch.long)
    response = torch.zeros(n, s, dtype=torch.long)
    for i in range(n):
        response[i, 5: 6 + i % 4] = 1
    adv = torch.randn(n, 1, generator=gen) * response
    old = torch.randn(n, s, generator=gen) * 0.01 - 2.5
    return TrainBatch(ids, attention, response, adv, old, None)


def worker(rank, world, init_file, results):
    import torch.distributed as dist

    from dara_train.config import ModelConfig, OptimConfig
    from dara_train.distributed import full_state_dict, shard_policy
    from dara_train.model import build_policy
    from dara_train.ppo import TrainBatch
    from dara_train.train import update

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, _ = build_policy(ModelConfig())
        model = shard_policy(model, torch.device("cpu"), mixed_precision=False)
        # SGD keeps the comparison linear in the gradients; Adam's first step is
        # sign-like and would turn rounding-level gradient noise into full steps.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        full = make_batch()
        rows = torch.arange(full.input_ids.shape[0]).chunk(world)[rank]
        part = TrainBatch(*(t[rows] if t is not None else None for t in
                            (full.input_ids, full.attention_mask, full.response_mask, full.advantages,
                             full.old_logprobs, full.ref_logprobs)))
        update(model, optimizer, part, OptimConfig(ppo_epochs=2, mini_batches=1))
        state = full_state_dict(model)
        if rank == 0:
            results[world] = {k: v.detach().clone() for k, v in state.items()}
    finally:
        dist.destroy_process_group()


def run(world):
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        results = manager.dict()
        mp.start_processes(worker, args=(world, os.path.join(tmp, "init"), results), nprocs=world,
                           start_method="spawn", join=True)
        return dict(results)[world]


def test_two_process_update_equals_one_process():
    one, two = run(1), run(2)
    for name, value in one.items():
        torch.testing.assert_close(two[name], value, rtol=1e-5, atol=1e-6, msg=name)
    from dara_train.config import ModelConfig
    from dara_train.model import build_policy

    initial = build_policy(ModelConfig())[0].state_dict()
    changed = sum(not torch.equal(initial[k], one[k]) for k in one)
    assert changed > 0, "the update changed no parameter"
