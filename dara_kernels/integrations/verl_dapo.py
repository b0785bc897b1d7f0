"""verl's v1 DAPO group filter deciding on every reward component: `algorithm.filter_groups.metric` `dara_signal`
(criterion any) or `dara_sum_signal` (sum) read the components of `algorithm.gdpo_reward_keys` through the op's
flags with the estimators' settings (docs/integration-verl.md). A group of one trajectory is kept, as verl's
own filter keeps it (it needs two values to compare); everything else about the filter is verl's.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from dara_kernels.group_signal import Sampling

from . import patching
from .core import Run
from .groups import decide

# filter_groups.metric -> the criterion that keeps a group.
SIGNAL_METRICS = {"dara_signal": "any", "dara_sum_signal": "sum"}


@dataclass
class _Filter:
    run: Run
    criterion: str
    sampling: Sampling


def _signal_filtered_keys(buffer, partition_id: str):
    """ReplayBuffer._dapo_filtered_keys for SIGNAL_METRICS: the finished groups without signal."""
    import transfer_queue as tq

    dara: _Filter = buffer._dara_filter
    keys = dara.run.keys
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
        signal = decide(dara.run.settings, rewards, uids, dara.criterion, dara.run.weights)
        keep = signal.keep(keep_singletons=True)
        dara.sampling.add_signal(signal, keep)
        summed = (rewards * torch.tensor(dara.run.weights or [1.0] * len(keys))).nansum(1).tolist()
        for uid, group, total in zip(uids, signal.group_of_row.tolist(), summed):
            cache[uid] = None if keep[group] else total
    filtered = {uid: value for uid, value in cache.items() if value is not None}
    return set(filtered), Counter(filtered.values())


def _filtered_keys(original):
    def _dapo_filtered_keys(self, partition_id: str):
        if partition_id == "val" or getattr(self, "_dara_filter", None) is None:
            return original(self, partition_id)
        return _signal_filtered_keys(self, partition_id)

    return _dapo_filtered_keys


def _build_replay_buffer(original, check_at_launch):
    def build(self):
        run = check_at_launch(self.config.algorithm)  # the v1 trainer builds its buffer in its constructor
        buffer = original(self)
        criterion = SIGNAL_METRICS.get(getattr(buffer, "filter_groups_metric", None))
        if criterion is not None:
            buffer._dara_filter = _Filter(run, criterion, Sampling(criterion))
        return buffer

    return build


def sampling_metrics(buffer, trained_responses: int) -> dict:
    """The sampling metrics of the groups the filter classified since the last call; {} without the filter or
    a classification."""
    dara = getattr(buffer, "_dara_filter", None)
    if dara is None or not dara.sampling.rounds:
        return {}
    metrics = dara.sampling.metrics(trained_responses)
    dara.sampling = Sampling(dara.criterion)
    return metrics


def patches(check_at_launch) -> list:
    """Needs verl's v1 trainer (transfer_queue installed). `check_at_launch(algorithm)` is verl.py's: the run's
    settings, checked when the trainer builds its buffer. It is passed in rather than imported, since verl.py
    imports this module."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [patching.Patch(ReplayBuffer, "_dapo_filtered_keys", _filtered_keys),
            patching.Patch(PPOTrainer, "_build_replay_buffer",
                           lambda original: _build_replay_buffer(original, check_at_launch))]
