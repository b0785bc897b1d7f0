"""verl integration (tested with verl 0.9.1: the v1 trainer, verl's default, and the legacy one).

    +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=dara_kernels.integrations.verl.install
    algorithm.adv_estimator=dara                         # or gdpo_fused, rvpo
    +algorithm.gdpo_reward_keys=[accuracy,format,length] # reward components from compute_score's dict
    +algorithm.dara_options.alpha=0.5                    # any fused_advantage keyword

Importing this module (or calling `install`, which Ray's setup hook does in
every worker, the TaskRunner that computes advantages included) registers
"gdpo_fused", "dara" and "rvpo".

verl's dispatcher (`ray_trainer.compute_advantage`) passes the reward
components (`non_tensor_batch`, `batch`) only to the estimator named "gdpo";
any other estimator receives `token_level_rewards`, `response_mask`, `index`
and `config`. Rather than edit verl, this module wraps the dispatcher: the
wrapper only remembers the batch it was given (a context variable) and calls
verl's own function, so every verl estimator runs exactly as before, and the
two estimators registered here read their components from that batch. The
diagnostics (density, weights, energy per component) go to
`data.meta_info["dara_metrics"]`, and `ray_trainer.compute_data_metrics` is
wrapped to add them to the legacy trainer's step metrics.

verl's v1 trainer keeps each row in TransferQueue, and its
`PPOTrainer._compute_advantage` fetches only the uid, the response mask,
`rm_scores`, log-probabilities and values, so the components never reach the
dispatcher. For the estimators registered here (and only for them) a wrapper around
that method fetches them for the same keys, from where verl's reward path
leaves them, and hands them to the dispatcher wrapper, which adds them to the
batch; the diagnostics go into the `metrics` dict verl passes to that method,
which becomes the step's metrics.
"""
from __future__ import annotations

import contextvars
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from verl.trainer.ppo import core_algos, ray_trainer

import dara_kernels as dk

from .common import diagnostics, with_extra_metrics
from .groups import group_ids

_BATCH: contextvars.ContextVar = contextvars.ContextVar("dara_verl_batch", default=None)
_V1_STEP: contextvars.ContextVar = contextvars.ContextVar("dara_verl_v1_step", default=None)
_DEFAULT_OPTIONS: dict[str, Any] = {}
_ESTIMATORS = ("dara", "gdpo_fused", "rvpo")


@dataclass
class _V1Step:
    """What the v1 trainer's _compute_advantage call knows and verl's batch lacks; rows in the order of its keys."""
    components: dict  # reward key -> np.ndarray [N]
    padding: np.ndarray  # bool [N]: rows verl added to make the batch divisible
    metrics: dict  # the step's metrics


def configure(**options) -> None:
    """Default fused_advantage keywords for the "dara" estimator (for a typed
    AlgoConfig, which has no field for them; a Hydra config uses
    `algorithm.dara_options`)."""
    _DEFAULT_OPTIONS.clear()
    _DEFAULT_OPTIONS.update(options)


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
    groups = group_ids(index).to(rewards.device)
    mask = response_mask
    step = _V1_STEP.get()
    # The v1 trainer pads a batch with copies of a real row (its rewards, a zero mask, a uid of their own):
    # counted, they would be one more group in the density and energy. Their advantages stay 0.
    real = torch.from_numpy(~step.padding).to(rewards.device) if step is not None and step.padding.any() else None
    if real is not None:
        rewards, groups, mask = rewards[real], groups[real], response_mask[real]
    kwargs = dict(preset="verl", eps=epsilon, scale_by_std=norm_adv_by_std_in_grpo)
    kwargs.update(options)
    out = dk.fused_advantage(rewards, group_index=groups, method=method, reward_weights=weights,
                             response_mask=mask, **kwargs)
    metrics = diagnostics(out, names)
    _BATCH.get().meta_info["dara_metrics"] = metrics
    if step is not None:
        step.metrics.update(metrics)
    advantages = out.token_advantages if out.token_advantages is not None else out.advantages.unsqueeze(1) * mask
    if real is not None:
        full = advantages.new_zeros(response_mask.shape)
        full[real] = advantages
        advantages = full
    return advantages, advantages


@core_algos.register_adv_est("gdpo_fused")
def compute_gdpo_fused_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                                 norm_adv_by_std_in_grpo: bool = True, config: Optional[Any] = None, **kwargs):
    """verl's GDPO (compute_gdpo_outcome_advantage) computed by the fused op."""
    return _run("gdpo", {}, token_level_rewards, response_mask, index, config, epsilon, norm_adv_by_std_in_grpo)


def _configured(config, estimator: str, methods: tuple) -> tuple[str, dict]:
    """(method, options) from configure() and algorithm.dara_options; the method must be one of `methods`."""
    options = dict(_DEFAULT_OPTIONS)
    given = config.get("dara_options", None) if config is not None else None
    if given:
        options.update(dict(given))
    method = options.pop("method", methods[0])
    if method not in methods:
        raise ValueError(f"dara_options.method={method!r}: the {estimator} estimator runs method "
                         f"{' or '.join(methods)} (gdpo_fused is GDPO, dara runs dara or static, rvpo runs rvpo; "
                         "verl's own estimators cover the rest)")
    return method, options


@core_algos.register_adv_est("dara")
def compute_dara_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                           norm_adv_by_std_in_grpo: bool = True, config: Optional[Any] = None, **kwargs):
    """DARA on the gdpo_reward_keys components; options from algorithm.dara_options or configure().
    `method: static` there runs the paper's static-weight controls (weights from gdpo_reward_weights)."""
    method, options = _configured(config, "dara", ("dara", "static"))
    return _run(method, options, token_level_rewards, response_mask, index, config, epsilon,
                norm_adv_by_std_in_grpo)


@core_algos.register_adv_est("rvpo")
def compute_rvpo_advantage(token_level_rewards, response_mask, index, epsilon: float = 1e-6,
                           norm_adv_by_std_in_grpo: bool = True, config: Optional[Any] = None, **kwargs):
    """RVPO (the DARA authors' soft-minimum baseline) on the gdpo_reward_keys components, with verl's
    normalisation; its risk coefficient is algorithm.dara_options.rvpo_k (default 1, the authors' setting)."""
    method, options = _configured(config, "rvpo", ("rvpo",))
    return _run(method, options, token_level_rewards, response_mask, index, config, epsilon,
                norm_adv_by_std_in_grpo)


def _wrap_dispatcher(original):
    def compute_advantage(data, *args, **kwargs):
        step = _V1_STEP.get()
        if step is not None:
            if len(data) != len(step.padding):
                raise RuntimeError(f"verl's v1 trainer passed {len(data)} rows to compute_advantage for a batch of "
                                   f"{len(step.padding)} keys: the reward components cannot be matched to them")
            data.non_tensor_batch.update(step.components)
        token = _BATCH.set(data)
        try:
            return original(data, *args, **kwargs)
        finally:
            _BATCH.reset(token)

    compute_advantage.__wrapped__ = original
    compute_advantage.__doc__ = original.__doc__
    return compute_advantage


def _v1_components(batch, keys: list, colocated: bool) -> dict:
    """The reward components of a v1 batch (a KVBatchMeta), read from TransferQueue where verl's reward path
    wrote them: the reward loop workers (rule-based rewards, or a reward model with its own resource pool)
    leave compute_score's dict in each row's extra_fields["reward_extra_info"]; a colocated reward model
    writes its reward_extra_keys as fields of their own."""
    import transfer_queue as tq  # verl's v1 trainer needs it; install() wraps that trainer only where it is

    if colocated:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=keys)
        missing = [k for k in keys if k not in data.keys()]
        if missing:
            raise ValueError(f"reward components {missing} not in TransferQueue: the colocated reward model "
                             f"writes its reward_extra_keys there (found: {sorted(data.keys())})")
        return {k: np.array(list(data[k])) for k in keys}
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    infos = [row.get("reward_extra_info", {}) for row in data["extra_fields"]]
    missing = [k for k in keys if any(k not in info for info in infos)]
    if missing:
        raise ValueError(f"reward components {missing} not in every row's extra_fields['reward_extra_info'] "
                         f"(first row has: {sorted(infos[0])}): compute_score must return a dict with them")
    return {k: np.array([info[k] for info in infos]) for k in keys}


def _wrap_v1_compute_advantage(original):
    def _compute_advantage(self, batch, metrics):
        algorithm = self.config.algorithm
        keys = algorithm.get("gdpo_reward_keys", None)
        if algorithm.adv_estimator not in _ESTIMATORS or not keys:
            return original(self, batch, metrics)  # without keys the estimator raises its own error
        # The same test verl's _step_once makes to choose where the reward is computed.
        colocated = self.reward_loop_manager.reward_loop_worker_handles is None
        padding = np.array([bool(tag.get("is_padding", False)) for tag in batch.tags])
        token = _V1_STEP.set(_V1Step(_v1_components(batch, list(keys), colocated), padding, metrics))
        try:
            return original(self, batch, metrics)
        finally:
            _V1_STEP.reset(token)

    _compute_advantage.__wrapped__ = original
    _compute_advantage.__doc__ = original.__doc__
    return _compute_advantage


def install() -> None:
    """Idempotent: wrap verl's dispatcher (and its copy in the v1 trainer's utils), the legacy trainer's data
    metrics and, where transferqueue is installed, the v1 trainer's _compute_advantage and its DAPO group
    filter (verl_dapo). Usable as Ray's worker_process_setup_hook."""
    if not hasattr(ray_trainer.compute_advantage, "__wrapped__"):
        ray_trainer.compute_advantage = _wrap_dispatcher(ray_trainer.compute_advantage)
    v1_utils = sys.modules.get("verl.trainer.ppo.v1.utils")
    if v1_utils is not None and not hasattr(v1_utils.compute_advantage, "__wrapped__"):
        v1_utils.compute_advantage = _wrap_dispatcher(v1_utils.compute_advantage)
    if not hasattr(ray_trainer.compute_data_metrics, "__wrapped__"):
        ray_trainer.compute_data_metrics = with_extra_metrics(
            ray_trainer.compute_data_metrics, lambda batch, *_: batch.meta_info.get("dara_metrics", {}))
    if importlib.util.find_spec("transfer_queue") is None:
        return  # verl's v1 trainer imports transfer_queue at its top: without it there is no v1 trainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # its utils take the wrapped dispatcher

    if not hasattr(PPOTrainer._compute_advantage, "__wrapped__"):
        PPOTrainer._compute_advantage = _wrap_v1_compute_advantage(PPOTrainer._compute_advantage)
    from . import verl_dapo  # its filter metrics dara_signal and dara_sum_signal

    verl_dapo.install()


install()
