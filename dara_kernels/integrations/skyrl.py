"""SkyRL integration (tested with SkyRL 0.4.0, the `skyrl` package's `skyrl.train` trainer).

    python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=dara_kernels.integrations.skyrl \\
        trainer.algorithm.advantage_estimator=dara \\
        trainer.algorithm.dara_reward_keys='[accuracy,format,length]' \\
        trainer.algorithm.dara_reward_weights='[1.0,0.5,2.0]' trainer.algorithm.dara_options.alpha=0.5 ...

SkyRL's estimators (`@register_advantage_estimator`) receive the summed token-level rewards, the response
mask and the uids only. The reward components live in each response's `env_metrics` (what the environment's
`get_metrics()` returns), which `convert_to_training_input` drops. `DaraRayPPOTrainer` keeps them from the
generator output for the estimators registered here, "dara" and "gdpo_fused", and leaves out the rows SkyRL
pads the batch with (copies of row 0 with uids "pad0", ...; `metadata["pad_size"]`). Their diagnostics go to
the step's metrics. Its dynamic sampling (`trainer.algorithm.dynamic_sampling.type`) and zero-variance filter
keep a group where any reward varies (`groups.group_signal`), where SkyRL's look at the summed reward.

The options: SkyRL's typed config rejects unknown keys, and extending it is SkyRL's documented route
(`make_config`): `DaraSkyRLConfig` adds `DaraAlgorithmConfig`'s three fields under `trainer.algorithm`, and
`main` (what `trainer.override_entrypoint` calls) parses the command line with it.
"""
from __future__ import annotations

import contextvars
import sys
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import ray
import torch
from skyrl.backends.skyrl_train.utils import ppo_utils
from skyrl.train import trainer as trainer_module
from skyrl.train.config import AlgorithmConfig, make_config
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.trainer import RayPPOTrainer

import dara_kernels as dk
from dara_kernels.integrations.common import check_options, diagnostics
from dara_kernels.integrations.groups import group_ids, group_signal

ESTIMATORS = ("dara", "gdpo_fused")
RESCUED_DYNAMIC = "dara/dynamic_sampling/groups_kept_by_a_reward"
RESCUED_ZERO_VARIANCE = "dara/zero_variance_filter/groups_kept_by_a_reward"


@dataclass
class DaraAlgorithmConfig(AlgorithmConfig):
    dara_reward_keys: List[str] = field(default_factory=list)
    """The reward components: keys of each response's env_metrics (the environment's get_metrics())."""
    dara_reward_weights: Optional[List[float]] = None
    """b_k, one per key (default 1)."""
    dara_options: dict = field(default_factory=dict)
    """fused_advantage keywords; `method` picks the op's method for the "dara" estimator (default "dara")."""


DaraSkyRLConfig = make_config(algorithm_cls=DaraAlgorithmConfig)


@dataclass(frozen=True)
class _Settings:
    keys: tuple
    weights: Optional[list]
    method: str
    options: dict


def settings(algorithm) -> _Settings:
    """The estimator's settings from trainer.algorithm, checked (raises ValueError with the fix)."""
    keys = tuple(getattr(algorithm, "dara_reward_keys", None) or ())
    if not keys:
        raise ValueError("the dara / gdpo_fused estimators need trainer.algorithm.dara_reward_keys (keys of each "
                         "response's env_metrics) in a config built by dara_kernels.integrations.skyrl."
                         "DaraSkyRLConfig (launch with trainer.override_entrypoint=dara_kernels.integrations.skyrl)")
    weights = algorithm.dara_reward_weights
    if weights is not None and len(weights) != len(keys):
        raise ValueError(f"{len(weights)} dara_reward_weights for {len(keys)} dara_reward_keys")
    options = dict(algorithm.dara_options or {})
    method = options.pop("method", "dara") if algorithm.advantage_estimator == "dara" else "gdpo"
    if algorithm.advantage_estimator == "gdpo_fused" and "method" in options:
        raise ValueError("trainer.algorithm.dara_options.method is for the dara estimator; gdpo_fused is GDPO")
    options = check_options(method, options, "trainer.algorithm.dara_options")
    return _Settings(keys, list(weights) if weights is not None else None, method, options)


@dataclass
class _Step:
    """What compute_advantages_and_returns knows and SkyRL's estimator call lacks."""
    components: torch.Tensor  # [N, K] of the real rows, in batch order
    pad_size: int
    metrics: dict


_STEP: contextvars.ContextVar = contextvars.ContextVar("dara_skyrl_step", default=None)
# While DaraRayPPOTrainer.postprocess_generator_output runs: its rows' components (for the zero-variance filter).
_FILTERING: contextvars.ContextVar = contextvars.ContextVar("dara_skyrl_filtering", default=None)


def _run(method_of, token_level_rewards, response_mask, index, config, grpo_norm_by_std=True, **kwargs):
    step = _STEP.get()
    if step is None:
        raise RuntimeError("the dara / gdpo_fused estimators read the reward components that "
                           "dara_kernels.integrations.skyrl.DaraRayPPOTrainer keeps: use it as the trainer")
    s = settings(config)
    n = token_level_rewards.shape[0]
    real = n - step.pad_size
    if step.components.shape[0] != real:
        raise RuntimeError(f"{step.components.shape[0]} rows of reward components for {real} unpadded rows")
    kwargs = dict(scale_by_std=grpo_norm_by_std)
    kwargs.update(s.options)
    out = dk.fused_advantage(step.components.to(token_level_rewards.device), group_index=group_ids(index[:real]),
                             method=method_of(s), reward_weights=s.weights,
                             response_mask=response_mask[:real], **kwargs)
    step.metrics.update(diagnostics(out, s.keys))
    advantages = response_mask.new_zeros(response_mask.shape, dtype=torch.float32)
    advantages[:real] = out.token_advantages  # padding rows: 0 (their loss mask is 0 too)
    return advantages, advantages


def compute_dara_advantage(token_level_rewards, response_mask, index, config=None, **kwargs):
    """The op's method (dara_options.method, default "dara") on the dara_reward_keys components."""
    return _run(lambda s: s.method, token_level_rewards, response_mask, index, config, **kwargs)


def compute_gdpo_fused_advantage(token_level_rewards, response_mask, index, config=None, **kwargs):
    """GDPO on the dara_reward_keys components."""
    return _run(lambda s: "gdpo", token_level_rewards, response_mask, index, config, **kwargs)


def _components(generator_output, keys) -> torch.Tensor:
    """[N, K] float32 from each response's env_metrics; a None value is NaN (not scored)."""
    rows = generator_output.get("env_metrics")
    if rows is None or len(rows) != len(generator_output["response_ids"]):
        raise ValueError("the generator output has no env_metrics per response: the environment's get_metrics() "
                         "must return the reward components")
    missing = sorted({k for row in rows for k in keys if k not in row})
    if missing:
        raise ValueError(f"reward components {missing} not in every response's env_metrics "
                         f"(first response has: {sorted(rows[0])})")
    values = [[np.nan if row[k] is None else float(row[k]) for k in keys] for row in rows]
    return torch.tensor(values, dtype=torch.float32).reshape(len(rows), len(keys))


def _zero_variance_filter(original):
    def zero_variance_filter(rewards, uids, loss_masks=None, tol: float = 0.0):
        """SkyRL's filter's contract (indices of the rows to keep; a group with at most one live row is kept),
        deciding on every reward inside DaraRayPPOTrainer, on the summed reward elsewhere."""
        filtering = _FILTERING.get()
        if filtering is None:
            return original(rewards, uids, loss_masks=loss_masks, tol=tol)
        components, weights, metrics = filtering
        live = np.array([True] * len(uids) if loss_masks is None else [sum(m) > 0 for m in loss_masks])
        live_uids = np.asarray(uids, dtype=object)[live]
        signal = group_signal(components[torch.from_numpy(live)], live_uids, weights, tol=tol)
        keep = signal.keep_rows(keep_singletons=True).tolist()
        kept = {u for u, k in zip(live_uids.tolist(), keep) if k}
        kept |= set(uids) - set(live_uids.tolist())  # no live row: kept, as SkyRL does
        metrics[RESCUED_ZERO_VARIANCE] = signal.rescued
        return [i for i, u in enumerate(uids) if u in kept]

    zero_variance_filter.__wrapped__ = original
    return zero_variance_filter


class DaraRayPPOTrainer(RayPPOTrainer):
    """RayPPOTrainer that carries each response's reward components to the dara / gdpo_fused estimators and
    lets its dynamic sampling and zero-variance filter see every reward."""

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        algorithm = cfg.trainer.algorithm
        self._dara = settings(algorithm)  # fail before the models are built
        if cfg.generator.step_wise_trajectories:
            raise ValueError("DaraRayPPOTrainer does not cover generator.step_wise_trajectories")
        if algorithm.use_kl_in_reward and algorithm.advantage_estimator in ESTIMATORS:
            raise ValueError("use_kl_in_reward subtracts a KL term from the summed reward, which the reward "
                             "components do not carry: use use_kl_loss")
        self._dara_components: Optional[torch.Tensor] = None

    def _rows(self, generator_output) -> torch.Tensor:
        return _components(generator_output, self._dara.keys)

    def handle_dynamic_sampling(self, generator_output, uids):
        """SkyRL's strategies (filter, replace) keep a group when the std of `rewards` in it is > 0: they run
        on a stand-in reward that varies exactly in the groups where some component (or the sum) varies, and
        the real rewards are put back in the rows they keep."""
        signal = group_signal(self._rows(generator_output), uids, self._dara.weights)
        stand_in = (signal.keep_rows(keep_singletons=False) & signal.first_rows()).float().tolist()
        self.all_metrics[RESCUED_DYNAMIC] = self.all_metrics.get(RESCUED_DYNAMIC, 0) + signal.rescued
        marked = dict(generator_output, rewards=stand_in, dara_rewards=generator_output["rewards"])
        had_metrics = "rollout_metrics" in generator_output
        output, uids, keep_sampling = super().handle_dynamic_sampling(marked, uids)
        output["rewards"] = output.pop("dara_rewards")
        if not had_metrics:
            output.pop("rollout_metrics", None)  # recomputed from the stand-in when batches were joined
        return output, uids, keep_sampling

    def postprocess_generator_output(self, generator_output, uids, *args, **kwargs):
        token = _FILTERING.set((self._rows(generator_output), self._dara.weights, self.all_metrics))
        try:
            return super().postprocess_generator_output(generator_output, uids, *args, **kwargs)
        finally:
            _FILTERING.reset(token)

    def convert_to_training_input(self, generator_output, uids):
        self._dara_components = self._rows(generator_output)
        return super().convert_to_training_input(generator_output, uids)

    def compute_advantages_and_returns(self, data):
        if self.cfg.trainer.algorithm.advantage_estimator not in ESTIMATORS:
            return super().compute_advantages_and_returns(data)
        components, self._dara_components = self._dara_components, None
        if components is None:
            raise RuntimeError("compute_advantages_and_returns before convert_to_training_input: no components")
        step = _Step(components, int(data.metadata.get("pad_size", 0)), {})
        token = _STEP.set(step)
        try:
            data = super().compute_advantages_and_returns(data)
        finally:
            _STEP.reset(token)
        self.all_metrics.update(step.metrics)
        return data


class DaraPPOExp(BasePPOExp):
    def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client, generator,
                    colocate_pg):
        return DaraRayPPOTrainer(cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset,
                                 eval_dataset=eval_dataset, inference_engine_client=inference_engine_client,
                                 generator=generator, colocate_pg=colocate_pg)


@ray.remote(num_cpus=1)
def _entrypoint(cfg):
    DaraPPOExp(cfg).run()


def main() -> None:
    """What `python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=dara_kernels.integrations.skyrl
    ...` calls: SkyRL's main with DaraSkyRLConfig and DaraRayPPOTrainer."""
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    args = [a for a in sys.argv[1:] if not a.startswith("trainer.override_entrypoint=")]
    cfg = DaraSkyRLConfig.from_cli_overrides(args)
    validate_cfg(cfg)
    settings(cfg.trainer.algorithm)
    initialize_ray(cfg)
    ray.get(_entrypoint.remote(cfg))


def install() -> None:
    """Idempotent: register the estimators and wrap the trainer module's zero_variance_filter."""
    available = ppo_utils.AdvantageEstimatorRegistry.list_available()
    for name, estimator in zip(ESTIMATORS, (compute_dara_advantage, compute_gdpo_fused_advantage)):
        if name not in available:
            ppo_utils.AdvantageEstimatorRegistry.register(name, estimator)
    if not hasattr(trainer_module.zero_variance_filter, "__wrapped__"):
        trainer_module.zero_variance_filter = _zero_variance_filter(trainer_module.zero_variance_filter)


install()
