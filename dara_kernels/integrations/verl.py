"""verl integration (tested with verl 0.9.1).

    import dara_kernels.integrations.verl   # registers "gdpo_fused" and "dara"

    algorithm.adv_estimator=dara                        # or gdpo_fused
    algorithm.gdpo_reward_keys=[accuracy,format,length] # reward components from compute_score's dict
    +algorithm.dara_options.alpha=0.5                   # any fused_advantage keyword (Hydra)

verl's dispatcher (`ray_trainer.compute_advantage`) passes the reward
components (`non_tensor_batch`, `batch`) only to the estimator named "gdpo";
any other estimator receives `token_level_rewards`, `response_mask`, `index`
and `config`. Rather than edit verl, this module wraps the dispatcher: the
wrapper only remembers the batch it was given (a context variable) and calls
verl's own function, so every verl estimator runs exactly as before, and the
two estimators registered here read their components from that batch. The
diagnostics (density, weights, energy per component) go to
`data.meta_info["dara_metrics"]`, and `ray_trainer.compute_data_metrics` is
wrapped to add them to verl's step metrics.
"""
from __future__ import annotations

import contextvars
import sys
from typing import Any, Optional

import numpy as np
import torch
from verl.trainer.ppo import core_algos, ray_trainer

import dara_kernels as dk

_BATCH: contextvars.ContextVar = contextvars.ContextVar("dara_verl_batch", default=None)
_DEFAULT_OPTIONS: dict[str, Any] = {}


def configure(**options) -> None:
    """Default fused_advantage keywords for the "dara" estimator (for a typed
    AlgoConfig, which has no field for them; a Hydra config uses
    `algorithm.dara_options`)."""
    _DEFAULT_OPTIONS.clear()
    _DEFAULT_OPTIONS.update(options)


def group_ids(index) -> torch.Tensor:
    """uid strings (or any hashables) to int64 group ids, numbered in order of
    first appearance. One dict lookup per row: sorting the strings, as
    np.unique does, costs about ten times as much for a verl batch."""
    values = np.asarray(index)
    if values.dtype.kind in "iu":
        return torch.from_numpy(values.astype(np.int64))
    numbers: dict = {}
    return torch.from_numpy(np.fromiter((numbers.setdefault(u, len(numbers)) for u in values.tolist()),
                                        dtype=np.int64, count=len(values)))


def _components(config, token_level_rewards: torch.Tensor):
    """[N, K] rewards, base weights and names from the dispatcher's batch."""
    data = _BATCH.get()
    keys = config.get("gdpo_reward_keys", None) if config is not None else None
    if data is None or not keys:
        raise ValueError(
            "dara/gdpo_fused need algorithm.gdpo_reward_keys (the reward components in non_tensor_batch) "
            "and must be called through verl.trainer.ppo.ray_trainer.compute_advantage after "
            "`import dara_kernels.integrations.verl`")
    missing = [k for k in keys if k not in data.non_tensor_batch]
    if missing:
        raise ValueError(f"reward components {missing} not in non_tensor_batch "
                         f"(available: {sorted(data.non_tensor_batch)})")
    columns = [np.asarray(data.non_tensor_batch[k], dtype=np.float32) for k in keys]
    rewards = torch.from_numpy(np.stack(columns, 1)).to(token_level_rewards.device)
    weights = config.get("gdpo_reward_weights", None)
    return rewards, (list(weights) if weights is not None else None), list(keys)


def _run(method: str, options: dict, token_level_rewards, response_mask, index, config, epsilon,
         norm_adv_by_std_in_grpo):
    rewards, weights, names = _components(config, token_level_rewards)
    kwargs = dict(preset="verl", eps=epsilon, scale_by_std=norm_adv_by_std_in_grpo)
    kwargs.update(options)
    out = dk.fused_advantage(rewards, group_index=group_ids(index).to(rewards.device), method=method,
                             reward_weights=weights, response_mask=response_mask, **kwargs)
    data = _BATCH.get()
    data.meta_info["dara_metrics"] = {
        **{f"dara/density/{n}": float(out.density[i]) for i, n in enumerate(names)},
        **{f"dara/weight/{n}": float(out.weights[i]) for i, n in enumerate(names)},
        **{f"dara/energy/{n}": float(out.energy[i]) for i, n in enumerate(names)},
        "dara/batch_std": float(out.batch_std),
    }
    advantages = out.token_advantages if out.token_advantages is not None else \
        out.advantages.unsqueeze(1) * response_mask
    return advantages, advantages


@core_algos.register_adv_est("gdpo_fused")
def compute_gdpo_fused_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                 norm_adv_by_std_in_grpo: bool = True, config: Optional[Any] = None, **kwargs):
    """verl's GDPO (compute_gdpo_outcome_advantage) computed by the fused op."""
    return _run("gdpo", {}, token_level_rewards, response_mask, index, config, epsilon, norm_adv_by_std_in_grpo)


@core_algos.register_adv_est("dara")
def compute_dara_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                           norm_adv_by_std_in_grpo: bool = True, config: Optional[Any] = None, **kwargs):
    """DARA on the gdpo_reward_keys components; options from algorithm.dara_options or configure()."""
    options = dict(_DEFAULT_OPTIONS)
    given = config.get("dara_options", None) if config is not None else None
    if given:
        options.update(dict(given))
    return _run("dara", options, token_level_rewards, response_mask, index, config, epsilon,
                norm_adv_by_std_in_grpo)


def _wrap_dispatcher(original):
    def compute_advantage(data, *args, **kwargs):
        token = _BATCH.set(data)
        try:
            return original(data, *args, **kwargs)
        finally:
            _BATCH.reset(token)

    compute_advantage.__wrapped__ = original
    compute_advantage.__doc__ = original.__doc__
    return compute_advantage


def _wrap_data_metrics(original):
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        metrics.update(batch.meta_info.get("dara_metrics", {}))
        return metrics

    compute_data_metrics.__wrapped__ = original
    return compute_data_metrics


def install() -> None:
    """Idempotent: wrap verl's dispatcher (and its copy in the v1 trainer's utils) and data metrics."""
    if not hasattr(ray_trainer.compute_advantage, "__wrapped__"):
        ray_trainer.compute_advantage = _wrap_dispatcher(ray_trainer.compute_advantage)
    v1_utils = sys.modules.get("verl.trainer.ppo.v1.utils")
    if v1_utils is not None and not hasattr(v1_utils.compute_advantage, "__wrapped__"):
        v1_utils.compute_advantage = _wrap_dispatcher(v1_utils.compute_advantage)
    if not hasattr(ray_trainer.compute_data_metrics, "__wrapped__"):
        ray_trainer.compute_data_metrics = _wrap_data_metrics(ray_trainer.compute_data_metrics)


install()
