"""verl's v1 DAPO group filter looking at every reward component.

verl 0.9.1's v1 replay buffer drops a finished group when one number is the
same for all its trajectories: `rm_scores` (`algorithm.filter_groups.metric=reward`)
or one `reward_extra_info` key. A group whose components vary while their
sum is constant is dropped that way, yet GDPO, DARA and unequal weights give
it non-zero advantages. With this module installed (by
`dara_kernels.integrations.verl.install`) two more metric names read every
component named by `algorithm.gdpo_reward_keys`, weighted by
`algorithm.gdpo_reward_weights`, through the fused op's group flags
(docs/spec.md#group-signal):

    algorithm.filter_groups.enable=true
    algorithm.filter_groups.metric=dara_signal      # keep a group where any component varies
    algorithm.filter_groups.metric=dara_sum_signal  # keep a group where their weighted sum varies

Everything else about the filter (which groups are finished, the refill, the
classification cache, the `{shared value: count}` diagnostic, here the
group's summed reward) is verl's.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch

import dara_kernels as dk

from .groups import group_ids

# filter_groups.metric -> the fused op's per-row flag that keeps a group.
SIGNAL_METRICS = {"dara_signal": "informative", "dara_sum_signal": "sum_informative"}


def _signal_filtered_keys(buffer, partition_id: str):
    """ReplayBuffer._dapo_filtered_keys for SIGNAL_METRICS: the finished groups without signal."""
    import transfer_queue as tq

    keys, weights = buffer._dara_components
    finished = buffer.finished_keys[partition_id]
    cache = buffer._dapo_classification_cache[partition_id]
    for uid in cache.keys() - finished:
        del cache[uid]
    new = finished - cache.keys()
    rows = [key for key in buffer.partitions[partition_id] if key.split("_")[0] in new]
    missing = new - {key.split("_")[0] for key in rows}
    if rows:
        data = tq.kv_batch_get(keys=rows, partition_id=partition_id, select_fields=["extra_fields"])
        infos = [getattr(v, "data", v).get("reward_extra_info", {}) for v in data["extra_fields"]]
        missing |= {row.split("_")[0] for row, info in zip(rows, infos) if any(k not in info for k in keys)}
    if missing:
        raise RuntimeError(f"Finished groups are missing reward components {keys} (algorithm.gdpo_reward_keys) "
                           f"in reward_extra_info, which filter_groups.metric={buffer.filter_groups_metric!r} "
                           f"reads: {sorted(missing)[:5]}")
    if rows:
        rewards = torch.tensor([[float(info[k]) for k in keys] for info in infos], dtype=torch.float32)
        uids = [row.split("_")[0] for row in rows]
        out = dk.fused_advantage(rewards, group_index=group_ids(np.array(uids, dtype=object)), method="gdpo",
                                 reward_weights=weights)
        keep = getattr(out, SIGNAL_METRICS[buffer.filter_groups_metric]).tolist()
        summed = (rewards * torch.tensor(weights or [1.0] * len(keys))).sum(1).tolist()
        for uid, kept, total in zip(uids, keep, summed):
            cache[uid] = None if kept else total
    filtered = {uid: value for uid, value in cache.items() if value is not None}
    return set(filtered), Counter(filtered.values())


def _wrap_filtered_keys(original):
    def _dapo_filtered_keys(self, partition_id: str):
        if partition_id == "val" or getattr(self, "_dara_components", None) is None:
            return original(self, partition_id)
        return _signal_filtered_keys(self, partition_id)

    _dapo_filtered_keys.__wrapped__ = original
    return _dapo_filtered_keys


def _wrap_build_replay_buffer(original):
    def _build_replay_buffer(self):
        buffer = original(self)
        algorithm = self.config.algorithm
        filter_groups = algorithm.get("filter_groups", None)
        metric = filter_groups.get("metric", None) if filter_groups is not None else None
        if getattr(buffer, "filter_groups_metric", None) in SIGNAL_METRICS:
            keys = algorithm.get("gdpo_reward_keys", None)
            if not keys:
                raise ValueError(f"algorithm.filter_groups.metric={metric!r} reads the reward components named by "
                                 "algorithm.gdpo_reward_keys, which is not set")
            weights = algorithm.get("gdpo_reward_weights", None)
            buffer._dara_components = (list(keys), list(weights) if weights is not None else None)
        return buffer

    _build_replay_buffer.__wrapped__ = original
    return _build_replay_buffer


def install() -> None:
    """Idempotent; needs verl's v1 trainer (transfer_queue installed)."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    if not hasattr(ReplayBuffer._dapo_filtered_keys, "__wrapped__"):
        ReplayBuffer._dapo_filtered_keys = _wrap_filtered_keys(ReplayBuffer._dapo_filtered_keys)
    if not hasattr(PPOTrainer._build_replay_buffer, "__wrapped__"):
        PPOTrainer._build_replay_buffer = _wrap_build_replay_buffer(PPOTrainer._build_replay_buffer)
