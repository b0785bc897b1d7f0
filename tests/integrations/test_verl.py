"""`gdpo_fused` through verl's own dispatcher equals verl's `gdpo` through it,
on batches with shuffled uids, uneven groups and a singleton group; `dara`
runs through it and reports its diagnostics. Runs where verl is installed
(CI: the verl virtual environment of .ci/run)."""
import copy

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import ray_trainer  # noqa: E402

import dara_kernels.integrations.verl as dara_verl  # noqa: E402

KEYS = ["accuracy", "format", "length"]


def make_batch(seed: int) -> DataProto:
    rng = np.random.default_rng(seed)
    sizes = [1, 5, 3, 8, 2, 7, 4]  # uneven groups and a singleton
    uids = np.concatenate([[f"prompt-{seed}-{g}"] * s for g, s in enumerate(sizes)]).astype(object)
    n = len(uids)
    order = rng.permutation(n)
    uids = uids[order]
    prompt_len, resp_len = 6, 9
    lengths = rng.integers(1, resp_len + 1, n)
    response_mask = (np.arange(resp_len)[None, :] < lengths[:, None]).astype(np.float32)
    attention = np.concatenate([np.ones((n, prompt_len), np.float32), response_mask], 1)
    components = {
        "accuracy": (rng.random(n) < 0.5).astype(np.float32),
        "format": (rng.random(n) < 0.1).astype(np.float32),
        "length": rng.normal(0.3, 1.0, n).astype(np.float32),
    }
    tensors = {
        "prompts": torch.zeros(n, prompt_len, dtype=torch.long),
        "attention_mask": torch.from_numpy(attention).long(),
        "response_mask": torch.from_numpy(response_mask),
        "token_level_rewards": torch.zeros(n, resp_len),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids, **components})


@pytest.mark.parametrize("seed", range(5))
def test_gdpo_fused_equals_verl_gdpo(seed):
    config = AlgoConfig(gdpo_reward_keys=KEYS, gdpo_reward_weights=[1.0, 0.5, 2.0])
    data = make_batch(seed)
    theirs = ray_trainer.compute_advantage(copy.deepcopy(data), adv_estimator="gdpo", config=config)
    ours = ray_trainer.compute_advantage(copy.deepcopy(data), adv_estimator="gdpo_fused", config=config)
    a, b = theirs.batch["advantages"], ours.batch["advantages"]
    scale = max(1.0, a.abs().max().item())
    err = (a - b).abs().max().item() / scale
    print(f"seed {seed}: largest difference {err:.2e} (relative to max |A| = {scale:.2f})")
    assert err < 1e-5
    assert torch.equal(theirs.batch["returns"], a)


def test_dara_through_dispatcher_reports_metrics():
    dara_verl.configure(alpha=0.5)
    config = AlgoConfig(gdpo_reward_keys=KEYS)
    data = ray_trainer.compute_advantage(make_batch(7), adv_estimator="dara", config=config)
    metrics = data.meta_info["dara_metrics"]
    for key in KEYS:
        assert 0.0 <= metrics[f"dara/density/{key}"] <= 1.0
        assert f"dara/weight/{key}" in metrics and f"dara/energy/{key}" in metrics
    adv = data.batch["advantages"]
    assert torch.isfinite(adv).all() and (adv * (1 - data.batch["response_mask"])).abs().max() == 0


@pytest.mark.parametrize("estimator", ["gdpo", "grpo", "rloo"])
def test_verl_estimators_untouched(estimator):
    """Through the wrapper, verl's own estimators give what the unwrapped dispatcher gives."""
    config = AlgoConfig(gdpo_reward_keys=KEYS)
    data = make_batch(3)
    data.batch["token_level_rewards"][:, -1] = torch.from_numpy(data.non_tensor_batch["accuracy"])
    unwrapped = ray_trainer.compute_advantage.__wrapped__(copy.deepcopy(data), adv_estimator=estimator,
                                                          config=config)
    wrapped = ray_trainer.compute_advantage(copy.deepcopy(data), adv_estimator=estimator, config=config)
    assert torch.equal(unwrapped.batch["advantages"], wrapped.batch["advantages"])


def test_group_ids_number_uids_by_first_appearance():
    ids = dara_verl.group_ids(np.array(["b", "a", "b", "c"], dtype=object))
    assert ids.dtype == torch.int64 and ids.tolist() == [0, 1, 0, 2]
    assert dara_verl.group_ids(np.array([7, 3, 7], dtype=np.int32)).tolist() == [7, 3, 7]
