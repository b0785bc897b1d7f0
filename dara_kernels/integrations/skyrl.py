"""SkyRL integration (tested with SkyRL 0.4.0, the `skyrl.train` trainer); the user's side is
docs/integration-skyrl.md.

    python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=dara_kernels.integrations.skyrl \\
        trainer.algorithm.advantage_estimator=dara trainer.algorithm.dara_reward_keys='[accuracy,format,length]' \\
        trainer.algorithm.dara_options.alpha=0.5 ...

SkyRL's estimators see the summed reward only, and its typed config rejects unknown keys: `DaraSkyRLConfig`
(SkyRL's own `make_config` route) adds the settings, and `DaraRayPPOTrainer` keeps each response's
components (its env_metrics) for the estimators registered here and lets dynamic sampling and the
zero-variance filter decide on them.
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

from dara_kernels.group_signal import Sampling, check_criterion, group_ids

from . import patching
from .core import ESTIMATORS, Honoured, Run, advantages, diagnostics, estimator_run, refuse
from .groups import decide

DYNAMIC_SAMPLING = "dara/sampling/"
ZERO_VARIANCE_FILTER = "dara/zero_variance_filter/"
WHERE = "trainer.algorithm.dara_options"
_SKYRL_TOL = AlgorithmConfig.__dataclass_fields__["zero_variance_filter_tol"].default


@dataclass
class DaraAlgorithmConfig(AlgorithmConfig):
    dara_reward_keys: List[str] = field(default_factory=list)
    """The reward components: keys of each response's env_metrics (the environment's get_metrics())."""
    dara_reward_weights: Optional[List[float]] = None
    """b_k, one per key (default 1)."""
    dara_options: dict = field(default_factory=dict)
    """fused_advantage keywords; `method` picks the op's method for the "dara" estimator (default "dara")."""
    dara_signal: str = "any"
    """What dynamic sampling and the zero-variance filter keep: "any" (a group where some reward varies) or
    "sum" (where the weighted sum varies)."""


DaraSkyRLConfig = make_config(algorithm_cls=DaraAlgorithmConfig)


@dataclass(frozen=True)
class _Settings:
    run: Run
    criterion: str


# SkyRL's grpo statistics (torch.std + 1e-6, the op's defaults) and its rule for a group of one response (mean 0,
# std 1: verl's); SkyRL has no per-reward estimator, so the other methods keep the op's batch normalisation.
DEFAULTS = {"singleton": "verl"}


def settings(algorithm) -> _Settings:
    """The estimators' and filters' settings from trainer.algorithm, checked (raises ValueError with the fix); the
    trainer.algorithm settings that change the advantages are honoured or refused by name."""
    if algorithm.zero_variance_filter and algorithm.zero_variance_filter_tol != _SKYRL_TOL:
        raise refuse("trainer.algorithm.zero_variance_filter_tol", algorithm.zero_variance_filter_tol,
                     "does not reach DaraRayPPOTrainer's zero-variance filter, which decides with the op's tolerance",
                     f"set {WHERE}.active_tol (the advantages use it too)")
    if algorithm.use_kl_in_reward and algorithm.advantage_estimator in ESTIMATORS:
        raise refuse("trainer.algorithm.use_kl_in_reward", True, "subtracts a KL term from the summed reward, "
                     "which the reward components do not carry", "use use_kl_loss")
    # SkyRL hands every estimator its grpo_norm_by_std; the filters read the same settings.
    norm = bool(algorithm.grpo_norm_by_std)
    honoured = [Honoured("trainer.algorithm.grpo_norm_by_std", norm, {"scale_by_std": norm}, norm)]
    run = estimator_run(algorithm.advantage_estimator, algorithm.dara_options or {},
                        getattr(algorithm, "dara_reward_keys", None), algorithm.dara_reward_weights, WHERE,
                        "trainer.algorithm.dara_reward_keys", defaults=DEFAULTS, honoured=honoured,
                        keys_hint=" (keys of each response's env_metrics), in a DaraSkyRLConfig "
                        "(trainer.override_entrypoint=dara_kernels.integrations.skyrl)")
    return _Settings(run, check_criterion(algorithm.dara_signal, "trainer.algorithm.dara_signal"))


@dataclass
class _Step:
    """What compute_advantages_and_returns knows and SkyRL's estimator call lacks."""
    components: torch.Tensor  # [N, K] of the real rows, in batch order
    pad_size: int
    metrics: dict


_STEP: contextvars.ContextVar = contextvars.ContextVar("dara_skyrl_step", default=None)
# While DaraRayPPOTrainer.postprocess_generator_output runs: its rows' components (for the zero-variance filter).
_FILTERING: contextvars.ContextVar = contextvars.ContextVar("dara_skyrl_filtering", default=None)


def _run(estimator: str, token_level_rewards, response_mask, index, config) -> tuple:
    step = _STEP.get()
    if step is None:
        raise RuntimeError("the dara / gdpo_fused estimators read the reward components that "
                           "dara_kernels.integrations.skyrl.DaraRayPPOTrainer keeps: use it as the trainer")
    if config.advantage_estimator != estimator:
        raise RuntimeError(f"the {estimator} estimator called with advantage_estimator={config.advantage_estimator}")
    s = settings(config)
    n = token_level_rewards.shape[0]
    real = n - step.pad_size
    if step.components.shape[0] != real:
        raise RuntimeError(f"{step.components.shape[0]} rows of reward components for {real} unpadded rows")
    # The padding rows (uids pad0, pad1, ...) are left out and get 0; their loss mask is 0 too.
    padding = torch.arange(n) >= real
    components = torch.cat([step.components, step.components.new_zeros(step.pad_size, len(s.run.keys))])
    result = advantages(s.run.settings, components.to(token_level_rewards.device), group_index=group_ids(index),
                        reward_weights=s.run.weights, response_mask=response_mask, padding=padding)
    step.metrics.update(diagnostics(result.output, s.run.keys))
    return result.token_advantages, result.token_advantages


def _estimator(name: str):
    def estimator(token_level_rewards, response_mask, index, config=None, **kwargs):
        return _run(name, token_level_rewards, response_mask, index, config)

    return estimator


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
        deciding by the op's flags on the components inside DaraRayPPOTrainer, as SkyRL elsewhere."""
        filtering = _FILTERING.get()
        if filtering is None:
            return original(rewards, uids, loss_masks=loss_masks, tol=tol)
        components, s, metrics = filtering
        live = np.array([True] * len(uids) if loss_masks is None else [sum(m) > 0 for m in loss_masks])
        live_uids = np.asarray(uids, dtype=object)[live]
        signal = decide(s.run.settings, components[torch.from_numpy(live)], live_uids, s.criterion, s.run.weights)
        keep = signal.keep(keep_singletons=True)
        kept = {u for u, g in zip(live_uids.tolist(), signal.group_of_row.tolist()) if keep[g]}
        kept |= set(uids) - set(live_uids.tolist())  # no live row: kept, as SkyRL does
        sampling = Sampling(s.criterion)
        sampling.add_signal(signal, keep)
        metrics.update(sampling.metrics(int(keep[signal.group_of_row].sum()), ZERO_VARIANCE_FILTER))
        return [i for i, u in enumerate(uids) if u in kept]

    return zero_variance_filter


class DaraRayPPOTrainer(RayPPOTrainer):
    """RayPPOTrainer that carries each response's reward components to the dara / gdpo_fused estimators and
    lets its dynamic sampling and zero-variance filter see every reward."""

    def __init__(self, cfg, *args, **kwargs):
        install()
        super().__init__(cfg, *args, **kwargs)
        algorithm = cfg.trainer.algorithm
        self._dara = settings(algorithm)  # fail before the models are built
        if cfg.generator.step_wise_trajectories:
            raise ValueError("DaraRayPPOTrainer does not cover generator.step_wise_trajectories")
        self._dara_components: Optional[torch.Tensor] = None
        self._dara_sampling = Sampling(self._dara.criterion)

    def _rows(self, generator_output) -> torch.Tensor:
        return _components(generator_output, self._dara.run.keys)

    def handle_dynamic_sampling(self, generator_output, uids):
        """SkyRL's strategies (filter, replace) keep a group when the std of `rewards` in it is > 0: they run
        on a stand-in reward that varies exactly in the groups the criterion keeps, and the real rewards are
        put back in the rows they keep. A group of one response is kept where SkyRL keeps it
        (n_samples_per_prompt = 1)."""
        signal = decide(self._dara.run.settings, self._rows(generator_output), uids, self._dara.criterion,
                        self._dara.run.weights)
        keep = signal.keep(keep_singletons=self.cfg.generator.n_samples_per_prompt == 1)
        self._dara_sampling.add_signal(signal, keep)
        stand_in = (keep[signal.group_of_row] & signal.first_rows()).float().tolist()
        marked = dict(generator_output, rewards=stand_in, dara_rewards=generator_output["rewards"])
        had_metrics = "rollout_metrics" in generator_output
        output, uids, keep_sampling = super().handle_dynamic_sampling(marked, uids)
        output["rewards"] = output.pop("dara_rewards")
        if not had_metrics:
            output.pop("rollout_metrics", None)  # recomputed from the stand-in when batches were joined
        if not keep_sampling:
            self.all_metrics.update(self._dara_sampling.metrics(len(uids), DYNAMIC_SAMPLING))
            self._dara_sampling = Sampling(self._dara.criterion)
        return output, uids, keep_sampling

    def postprocess_generator_output(self, generator_output, uids, *args, **kwargs):
        token = _FILTERING.set((self._rows(generator_output), self._dara, self.all_metrics))
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
    install()
    initialize_ray(cfg)
    ray.get(_entrypoint.remote(cfg))


# "dara": the op's dara_options.method (default dara); "gdpo_fused": GDPO.
_ESTIMATOR_FUNCTIONS = {name: _estimator(name) for name in ESTIMATORS}
PATCHES = (patching.Patch(trainer_module, "zero_variance_filter", _zero_variance_filter),)


def install() -> None:
    """Register the estimators and wrap the trainer module's zero_variance_filter; idempotent."""
    available = ppo_utils.AdvantageEstimatorRegistry.list_available()
    for name, estimator in _ESTIMATOR_FUNCTIONS.items():
        if name not in available:
            ppo_utils.AdvantageEstimatorRegistry.register(name, estimator)
    patching.install(PATCHES)


def uninstall() -> None:
    patching.uninstall(PATCHES)
    available = ppo_utils.AdvantageEstimatorRegistry.list_available()
    for name in _ESTIMATOR_FUNCTIONS:
        if name in available:
            ppo_utils.AdvantageEstimatorRegistry.unregister(name)
