"""verl integration (tested with verl 0.9.1: the v1 trainer, verl's default, and the legacy one); the user's
side is docs/integration-verl.md.

    +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=dara_kernels.integrations.verl.install
    algorithm.adv_estimator=dara                         # or gdpo_fused
    +algorithm.gdpo_reward_keys=[accuracy,format,length] # reward components from compute_score's dict
    +algorithm.dara_options.alpha=0.5                    # any fused_advantage keyword; method: any of the op's

verl hands the reward components only to its own "gdpo", and its v1 trainer does not even fetch them from
TransferQueue: the dispatcher is wrapped to remember its batch (a context variable) for the estimators
registered here, and the v1 trainer's _compute_advantage to fetch the components into it. Everything else
about verl's estimators runs unchanged.
"""
from __future__ import annotations

import contextvars
import importlib.util
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from verl.trainer.ppo import core_algos, ray_trainer

from dara_kernels.group_signal import group_ids

from . import patching
from .core import ESTIMATORS as ESTIMATOR_NAMES
from .core import Honoured, Run, advantages, diagnostics, estimator_method, estimator_run, refuse, with_extra_metrics
from .verl_dapo import SIGNAL_METRICS, sampling_metrics
from .verl_dapo import patches as filter_patches

_BATCH: contextvars.ContextVar = contextvars.ContextVar("dara_verl_batch", default=None)
_V1_STEP: contextvars.ContextVar = contextvars.ContextVar("dara_verl_v1_step", default=None)
_DEFAULT_OPTIONS: dict[str, Any] = {}
WHERE = "algorithm.dara_options"


def configure(**options) -> None:
    """Default fused_advantage keywords (and `method`) for the estimators, for a typed AlgoConfig, which has
    no field for them; a Hydra config uses `algorithm.dara_options`, which overrides these."""
    _DEFAULT_OPTIONS.clear()
    _DEFAULT_OPTIONS.update(options)


# verl's group statistics (torch.std + 1e-6, a group of one: mean 0, std 1) and, for every estimator but grpo,
# gdpo's masked whitening; verl's grpo (compute_grpo_outcome_advantage) stops at the group normalisation.
DEFAULTS = {"preset": "verl"}
GRPO_DEFAULTS = {"preset": "verl", "batch_norm": "none"}


def run_settings(algorithm, estimator: str) -> Run:
    """The settings of `estimator` from verl's algorithm config, checked: raises ValueError naming the setting.
    verl's algorithm settings that change the advantages are honoured or refused by name."""
    options = {**_DEFAULT_OPTIONS, **dict(algorithm.get("dara_options", None) or {})}
    if estimator in ESTIMATOR_NAMES and algorithm.get("use_kl_in_reward", False):
        raise refuse("algorithm.use_kl_in_reward", True, "subtracts a KL term from token_level_rewards, which the "
                     f"reward components that {estimator} reads do not carry (verl's own gdpo ignores it too)",
                     "use the KL loss (actor_rollout_ref.actor.use_kl_loss=true) instead")
    norm = algorithm.get("norm_adv_by_std_in_grpo", True)
    # verl's dispatcher hands the flag to its grpo only; its gdpo function takes it too: both meanings are the op's.
    honoured = [Honoured("algorithm.norm_adv_by_std_in_grpo", norm, {"scale_by_std": bool(norm)}, bool(norm))]
    method = estimator_method(estimator, options, WHERE)
    return estimator_run(estimator, options, algorithm.get("gdpo_reward_keys", None),
                         algorithm.get("gdpo_reward_weights", None), WHERE, "algorithm.gdpo_reward_keys",
                         defaults=GRPO_DEFAULTS if method == "grpo" else DEFAULTS,
                         keys_hint=" in compute_score's dict", honoured=honoured)


def check_at_launch(algorithm) -> Optional[Run]:
    """The run's settings where an estimator or a filter metric of this integration is configured."""
    filter_groups = algorithm.get("filter_groups", None)
    metric = filter_groups.get("metric", None) if filter_groups and filter_groups.get("enable", False) else None
    if algorithm.adv_estimator not in ESTIMATORS and metric not in SIGNAL_METRICS:
        return None
    return run_settings(algorithm, algorithm.adv_estimator)


@dataclass
class _V1Step:
    """What the v1 trainer's _compute_advantage call knows and verl's batch lacks; rows in the order of its keys."""
    components: dict  # reward key -> np.ndarray [N]
    padding: np.ndarray  # bool [N]: rows verl added to make the batch divisible
    metrics: dict  # the step's metrics


def _components(data, run: Run, device) -> torch.Tensor:
    """[N, K] rewards from the dispatcher's batch."""
    missing = [k for k in run.keys if k not in data.non_tensor_batch]
    if missing:
        raise ValueError(f"reward components {missing} not in non_tensor_batch "
                         f"(available: {sorted(data.non_tensor_batch)})")
    columns = [np.asarray(data.non_tensor_batch[k], dtype=np.float32) for k in run.keys]
    return torch.from_numpy(np.stack(columns, 1)).to(device)


def _estimate(estimator: str, token_level_rewards, response_mask, index, config):
    data = _BATCH.get()
    if data is None or config is None:
        raise ValueError("dara/gdpo_fused must be called through verl.trainer.ppo.ray_trainer.compute_advantage "
                         "after dara_kernels.integrations.verl.install()")
    run = run_settings(config, estimator)
    rewards = _components(data, run, token_level_rewards.device)
    step = _V1_STEP.get()
    # The v1 trainer pads a batch with copies of a real row (its rewards, a zero mask, a uid of their own).
    padding = torch.from_numpy(step.padding) if step is not None else None
    result = advantages(run.settings, rewards, group_index=group_ids(index).to(rewards.device),
                        reward_weights=run.weights, response_mask=response_mask, padding=padding)
    metrics = diagnostics(result.output, run.keys)
    data.meta_info["dara_metrics"] = metrics
    if step is not None:
        step.metrics.update(metrics)
    return result.token_advantages, result.token_advantages


def _estimator(name: str):
    def estimator(token_level_rewards, response_mask, index, config: Optional[Any] = None, **kwargs):
        return _estimate(name, token_level_rewards, response_mask, index, config)

    return estimator


# "dara": the op's dara_options.method (default dara); "gdpo_fused": verl's gdpo (compute_gdpo_outcome_advantage).
ESTIMATORS = {name: _estimator(name) for name in ESTIMATOR_NAMES}


def _dispatcher(original):
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


def _v1_compute_advantage(original):
    def _compute_advantage(self, batch, metrics):
        padding = np.array([bool(tag.get("is_padding", False)) for tag in batch.tags])
        metrics.update(sampling_metrics(self.replay_buffer, int((~padding).sum())))
        algorithm = self.config.algorithm
        if algorithm.adv_estimator not in ESTIMATORS:
            return original(self, batch, metrics)
        keys = run_settings(algorithm, algorithm.adv_estimator).keys
        # The same test verl's _step_once makes to choose where the reward is computed.
        colocated = self.reward_loop_manager.reward_loop_worker_handles is None
        token = _V1_STEP.set(_V1Step(_v1_components(batch, keys, colocated), padding, metrics))
        try:
            return original(self, batch, metrics)
        finally:
            _V1_STEP.reset(token)

    return _compute_advantage


def _checked_at_construction(original):
    def __init__(self, config, *args, **kwargs):
        check_at_launch(config.algorithm)
        original(self, config, *args, **kwargs)

    return __init__


def patches() -> list:
    """What install patches: verl's dispatcher (and its copy in the v1 trainer's utils), the legacy trainer's
    constructor and data metrics and, where transferqueue is installed, the v1 trainer's _compute_advantage
    and its DAPO group filter (verl_dapo)."""
    found = [patching.Patch(ray_trainer, "compute_advantage", _dispatcher),
             patching.Patch(ray_trainer.RayPPOTrainer, "__init__", _checked_at_construction),
             patching.Patch(ray_trainer, "compute_data_metrics", lambda original: with_extra_metrics(
                 original, lambda batch, *_: batch.meta_info.get("dara_metrics", {})))]
    if importlib.util.find_spec("transfer_queue") is None:
        return found  # verl's v1 trainer imports transfer_queue at its top: without it there is no v1 trainer
    from verl.trainer.ppo.v1 import utils as v1_utils
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return found + [patching.Patch(v1_utils, "compute_advantage", _dispatcher),
                    patching.Patch(PPOTrainer, "_compute_advantage", _v1_compute_advantage),
                    *filter_patches(check_at_launch)]


def install() -> None:
    """Register the estimators and patch verl; idempotent. Usable as Ray's worker_process_setup_hook."""
    for name, estimator in ESTIMATORS.items():
        core_algos.register_adv_est(name)(estimator)
    patching.install(patches())


def uninstall() -> None:
    patching.uninstall(patches())
    for name, estimator in ESTIMATORS.items():
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is estimator:
            del core_algos.ADV_ESTIMATOR_REGISTRY[name]

