"""TRL integration (tested with TRL 1.16.0).

    from dara_kernels.integrations.trl import DaraGRPOTrainer
    trainer = DaraGRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...,
                              advantage_method="dara", advantage_options={"alpha": 0.5})

A drop-in subclass of `trl.GRPOTrainer`: TRL generates, scores (reward
functions may return None: NaN, "cannot score") and trains as usual; the
advantages come from `dara_kernels.fused_advantage` with `group_size` =
`num_generations` and TRL's `reward_weights`. With
`advantage_method="gdpo", advantage_options={"preset": "trl"}` they equal
TRL's own `multi_objective_aggregation="normalize_then_sum"`. Each step's
density, weight and energy per reward function go to TRL's metrics
(`dara/density/<reward>`, ...).

Several processes: when every process holds whole groups (its completions
are a multiple of num_generations, which TRL's repeat sampler lays out
group by group), rewards stay on their process and the op's process_group
mode all-reduces its O(K^2) accumulators instead of TRL gathering every
reward to every process. Otherwise TRL's gather is kept and each process
takes its slice.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.distributed as dist
from trl import GRPOTrainer
from trl.trainer import grpo_trainer as _grpo_module

import dara_kernels as dk

from .common import check_options


@contextlib.contextmanager
def _rewards_stay_local():
    """TRL's _calculate_rewards ends with accelerate's gather; skip it."""
    original = _grpo_module.gather
    _grpo_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        _grpo_module.gather = original


class DaraGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, advantage_method: str = "dara", advantage_options: Optional[dict] = None,
                 **kwargs):
        # Fail before loading a model: a method-specific option for another method, a bad value.
        options = check_options(advantage_method, advantage_options or {}, "advantage_options")
        super().__init__(*args, **kwargs)
        self.advantage_method = advantage_method
        self.advantage_options = options
        self._dara_rewards: Optional[torch.Tensor] = None
        self._dara_local = False

    def _group_size(self) -> int:
        return self.num_generations if self.model.training else self.num_generations_eval

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        local = self.accelerator.num_processes > 1 and len(prompts) % self._group_size() == 0
        with _rewards_stay_local() if local else contextlib.nullcontext():
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._dara_rewards, self._dara_local = rewards, local
        return rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards = self._dara_rewards
        options = dict(self.advantage_options)
        if self._dara_local:
            options["process_group"] = dist.group.WORLD
        out = dk.fused_advantage(rewards, group_size=self._group_size(), method=self.advantage_method,
                                 reward_weights=self.reward_weights.to(rewards.device), **options)
        advantages = out.advantages
        if not self._dara_local:
            n = output["completion_ids"].shape[0]
            start = self.accelerator.process_index * n
            advantages = advantages[start:start + n]
        output["advantages"] = advantages.to(output["completion_ids"].device)
        mode = "train" if self.model.training else "eval"
        for i, name in enumerate(self.reward_func_names):
            self._metrics[mode][f"dara/density/{name}"].append(out.density[i].item())
            self._metrics[mode][f"dara/weight/{name}"].append(out.weights[i].item())
            self._metrics[mode][f"dara/energy/{name}"].append(out.energy[i].item())
        return output
