"""TRL integration (tested with TRL 1.16.0); the user's side is docs/integration-trl.md.

    trainer = DaraGRPOTrainer(model=..., reward_funcs=[...], args=GRPOConfig(...), train_dataset=...,
                              advantage_method="dara", advantage_options={"alpha": 0.5})

A drop-in subclass of `trl.GRPOTrainer` whose advantages come from the op (`group_size` = `num_generations`,
TRL's `reward_weights`), normalised as TRL normalises them: `grpo` is TRL's `sum_then_normalize` under its
`scale_rewards`, every other method is normalised as TRL's `normalize_then_sum` (`settings`). When every
process holds whole groups, rewards stay on their process and the op's process_group mode all-reduces its
accumulators instead of TRL gathering every reward everywhere.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
import torch.distributed as dist
from trl import GRPOConfig, GRPOTrainer
from trl.trainer import grpo_trainer as _grpo_module

from . import patching
from .core import Honoured, advantages, configure, diagnostics, refuse

WHERE = "advantage_options"
_DEFAULT = {name: GRPOConfig.__dataclass_fields__[name].default
            for name in ("multi_objective_aggregation", "scale_rewards")}
# TRL's group and batch normalisation constant (grpo_trainer: `+ 1e-4`) and nan-aware unbiased statistics are the
# trl preset's; TRL's sum_then_normalize stops at the group normalisation of the summed reward.
DEFAULTS = {"preset": "trl"}
GRPO_DEFAULTS = {"preset": "trl", "batch_norm": "none"}


def settings(method: str, options: dict, args: Optional[GRPOConfig] = None):
    """The run's settings from `advantage_method`, `advantage_options` and TRL's GRPOConfig (`args`; TRL's
    defaults when None), each GRPOConfig setting that changes the advantages honoured or refused by name."""
    aggregation = getattr(args, "multi_objective_aggregation", _DEFAULT["multi_objective_aggregation"])
    scale = getattr(args, "scale_rewards", _DEFAULT["scale_rewards"])
    if method == "grpo" and aggregation == "normalize_then_sum":
        raise ValueError("GRPOConfig.multi_objective_aggregation='normalize_then_sum' normalises each reward before "
                         "summing, advantage_method='grpo' sums them first: set advantage_method='gdpo' (TRL's "
                         "normalize_then_sum) or another per-reward method, or leave the aggregation at "
                         "'sum_then_normalize'")
    if scale == "batch":
        raise refuse("GRPOConfig.scale_rewards", scale, "divides by the standard deviation of the summed reward "
                     "over the whole batch, which the fused op does not compute",
                     "use 'group' (the standard deviation within each group) or 'none'")
    if scale == "none" and method != "grpo":
        raise refuse("GRPOConfig.scale_rewards", scale, f"leaves the summed reward unscaled in TRL's "
                     f"sum_then_normalize, which advantage_method={method!r} does not run (nor does TRL's "
                     "normalize_then_sum read it)", "leave it at 'group'; for per-reward advantages without the "
                     "standard deviation set advantage_options={'scale_by_std': False}")
    honoured = [Honoured("GRPOConfig.scale_rewards", scale, {"scale_by_std": scale != "none"},
                         scale == _DEFAULT["scale_rewards"])]
    return configure(method, options, WHERE, GRPO_DEFAULTS if method == "grpo" else DEFAULTS, honoured=honoured)

# TRL's _calculate_rewards ends with accelerate's gather; while rewards stay local it passes them through.
_LOCAL_REWARDS = (patching.Patch(_grpo_module, "gather", lambda original: lambda tensor: tensor),)


class DaraGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, advantage_method: str = "dara", advantage_options: Optional[dict] = None,
                 **kwargs):
        # Fail before loading a model: a method-specific option for another method, a bad value, a GRPOConfig
        # setting the op cannot express.
        config = kwargs["args"] if "args" in kwargs else (args[2] if len(args) > 2 else None)
        self.dara = settings(advantage_method, advantage_options or {}, config)
        super().__init__(*args, **kwargs)
        self._dara_rewards: Optional[torch.Tensor] = None
        self._dara_local = False

    def _group_size(self) -> int:
        return self.num_generations if self.model.training else self.num_generations_eval

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        local = self.accelerator.num_processes > 1 and len(prompts) % self._group_size() == 0
        with patching.patched(_LOCAL_REWARDS) if local else contextlib.nullcontext():
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._dara_rewards, self._dara_local = rewards, local
        return rewards

    def dara_advantages(self, rewards: torch.Tensor, local: bool = False) -> torch.Tensor:
        """The advantages of the step's rewards [N, K] (all processes', or this one's when `local`); the
        diagnostics join TRL's metrics."""
        result = advantages(self.dara, rewards, group_size=self._group_size(),
                            reward_weights=self.reward_weights.to(rewards.device),
                            process_group=dist.group.WORLD if local else None)
        mode = "train" if self.model.training else "eval"
        for name, value in diagnostics(result.output, self.reward_func_names).items():
            self._metrics[mode][name].append(value)
        return result.advantages

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        values = self.dara_advantages(self._dara_rewards, self._dara_local)
        if not self._dara_local:
            n = output["completion_ids"].shape[0]
            start = self.accelerator.process_index * n
            values = values[start:start + n]
        output["advantages"] = values.to(output["completion_ids"].device)
        return output
