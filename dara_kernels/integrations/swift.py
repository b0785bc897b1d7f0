"""ms-swift integration (tested with ms-swift 4.6.0: the GRPO trainer and the Ray driver's GRPO trainer); the
user's side is docs/integration-swift.md. In the `--external_plugins` file:

    from dara_kernels.integrations import swift
    swift.install()   # DARA_SWIFT_METHOD / DARA_SWIFT_OPTIONS / DARA_SWIFT_SIGNAL, or install("dara", alpha=0.5)

ms-swift has no estimator registry: each GRPO trainer's module imports the pure function
`swift.rl_core.advantage.compute_advantages`, and `install` points that name at the op, replaces the
dynamic-sampling signal, and wraps the trainer methods around them so that their diagnostics and sampling
metrics join the metrics the trainer logs. A trainer whose module does not import here (Megatron, or the
Ray driver without ray) cannot run here either and is left alone.
"""
from __future__ import annotations

import contextvars
import importlib
import json
import os
from typing import Callable, Optional

import torch

import dara_kernels as dk
from dara_kernels.group_signal import Sampling, check_criterion

from . import patching
from .core import Honoured, advantages, diagnostics, refuse, with_extra_metrics
from .core import configure as configure_settings
from .groups import decide

METHOD_ENV = "DARA_SWIFT_METHOD"
OPTIONS_ENV = "DARA_SWIFT_OPTIONS"
SIGNAL_ENV = "DARA_SWIFT_SIGNAL"

_HF = "swift.rlhf_trainers.grpo_trainer"
_MEGATRON = "swift.megatron.trainers.grpo_trainer"
_RAY = "swift.ray.megatron.grpo_trainer"
# What a trainer module needs that this environment may lack; any other missing module is an error.
_OPTIONAL_DEPENDENCIES = {_MEGATRON: {"megatron", "mcore_bridge", "transformer_engine"}, _RAY: {"ray"}}

_SETTINGS: dict = {}
# While a wrapped trainer method runs: what compute_advantages and the dynamic-sampling signal computed in it.
_RECORDS: contextvars.ContextVar = contextvars.ContextVar("dara_swift_records", default=None)


# ms-swift's grpo (rl_core.advantage.compute_advantages): the weighted nansum (a reward a function could not
# score counts 0), the group's torch.std + 1e-4, no batch normalisation; every other method is normalised as
# its --scale_rewards gdpo (nanstd + 1e-8 per reward, then the batch's std + 1e-8).
GRPO_DEFAULTS = {"eps": 1e-4, "nan_policy": "zero"}
DEFAULTS = {"eps": 1e-8, "bn_eps": 1e-8}
SCALE_REWARDS = "--scale_rewards"


def settings(method: str, options: dict, where: str, advantage_estimator: str = "grpo",
             scale_rewards: str = "group", kl_in_reward: bool = False, beta: float = 0.0):
    """The settings of the method and options under ms-swift's own (the trainer's attributes of the same
    names), each honoured or refused by name."""
    if advantage_estimator != "grpo":
        raise refuse("--advantage_estimator", advantage_estimator, f"is ms-swift's own estimator; with "
                     f"dara_kernels.integrations.swift the advantages are the fused op's {method!r}",
                     "drop the plugin for ms-swift's own estimators, or use --advantage_estimator grpo")
    if kl_in_reward and beta != 0.0:
        raise refuse("--kl_in_reward", True, "subtracts a KL term from the summed reward, which the fused op does "
                     "not take", "use ms-swift's KL loss (--beta without --kl_in_reward)")
    if scale_rewards == "batch":
        raise refuse(SCALE_REWARDS, scale_rewards, "divides by the standard deviation of the summed reward over the "
                     "batch, which the fused op does not compute", "use group or none (DARA_SWIFT_METHOD=grpo), or "
                     "gdpo")
    if method == "grpo" and scale_rewards == "gdpo":
        raise ValueError(f"{SCALE_REWARDS} gdpo normalises each reward before summing, {METHOD_ENV}=grpo sums them "
                         f"first: set {METHOD_ENV}=gdpo, or {SCALE_REWARDS} group or none")
    if method != "grpo" and scale_rewards == "none":
        raise refuse(SCALE_REWARDS, scale_rewards, f"leaves ms-swift's summed reward unscaled, which method "
                     f"{method!r} does not run", "use group or gdpo; for per-reward advantages without the standard "
                     f"deviation set {OPTIONS_ENV}='{{\"scale_by_std\": false}}'")
    default = scale_rewards == "group"
    if method == "grpo":
        honoured = [Honoured(SCALE_REWARDS, scale_rewards, {"scale_by_std": scale_rewards == "group"}, default)]
    else:  # group (ms-swift's default) and gdpo both mean each reward's group std, gdpo's normalisation
        honoured = [Honoured(SCALE_REWARDS, scale_rewards, {}, default)]
    return configure_settings(method, options, where, GRPO_DEFAULTS if method == "grpo" else DEFAULTS,
                              honoured=honoured)


def configure(method: str = "dara", signal: str = "any", where: str = "dara_kernels.integrations.swift.install",
              **options) -> None:
    """The fused_advantage method and keywords, and the dynamic-sampling criterion, checked now (under ms-swift's
    defaults; its own settings are checked when a trainer reads them) rather than at the first step."""
    _SETTINGS.update(method=method, options=dict(options), where=where, settings=settings(method, options, where),
                     criterion=check_criterion(signal, f"{where} signal"))


def run_settings(advantage_estimator: str = "grpo", scale_rewards: str = "group", kl_in_reward: bool = False,
                 beta: float = 0.0):
    """The configured method and options under a trainer's ms-swift settings."""
    return settings(_SETTINGS["method"], _SETTINGS["options"], _SETTINGS["where"], advantage_estimator,
                    scale_rewards, kl_in_reward, beta)


def _configure_from_environment() -> None:
    text = os.environ.get(OPTIONS_ENV, "{}")
    try:
        options = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{OPTIONS_ENV} must be a JSON object of fused_advantage keywords: {err}") from None
    if not isinstance(options, dict):
        raise ValueError(f"{OPTIONS_ENV} must be a JSON object of fused_advantage keywords, got {text!r}")
    configure(os.environ.get(METHOD_ENV, "dara"), os.environ.get(SIGNAL_ENV, "any"),
              f"{METHOD_ENV} / {OPTIONS_ENV} / {SIGNAL_ENV}", **options)


def compute_advantages(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, num_generations: int,
                       advantage_estimator: str = "grpo", scale_rewards: str = "group", kl_in_reward: bool = False,
                       beta: float = 0.0, kl_values: Optional[torch.Tensor] = None):
    """ms-swift's compute_advantages, computed by the fused op: (advantages [N], weighted rewards [N]).
    `scale_rewards` is honoured or refused (`settings`); ms-swift's other estimators and a KL term in the reward
    have no equivalent in the op and stop here."""
    settings = run_settings(advantage_estimator, scale_rewards, kl_in_reward, beta)
    if rewards_per_func.shape[1] == 0:
        raise ValueError("the fused op needs --reward_funcs (rewards_per_func has no column)")
    out = advantages(settings, rewards_per_func.float(), group_size=num_generations,
                     reward_weights=reward_weights.to(rewards_per_func.device)).output
    records = _RECORDS.get()
    if records is not None:
        records.append(out)
    weighted = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)  # ms-swift's reward metrics use it
    return out.advantages.to(rewards_per_func.device), weighted


def dynamic_sample_signal(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor,
                          num_generations: int) -> torch.Tensor:
    """In place of ms-swift's per-row std of the weighted sum, which `--dynamic_sample` keeps where > 0:
    1 for the rows of groups the criterion keeps, else 0. A group of one row is dropped, as ms-swift's std
    (0 there) drops it."""
    groups = torch.arange(rewards_per_func.shape[0]) // num_generations
    signal = decide(_SETTINGS["settings"], rewards_per_func, groups, _SETTINGS["criterion"], reward_weights.tolist())
    keep = signal.keep(keep_singletons=False)
    records = _RECORDS.get()
    if records is not None:
        records.append((signal, keep))
    return keep[signal.group_of_row].to(rewards_per_func.device, rewards_per_func.dtype)


def _metrics(records: list, names, result) -> dict:
    """The diagnostics of each advantage call and, for a dynamic-sampling call (which returns the rows it
    keeps), the sampling metrics over its rounds."""
    metrics: dict = {}
    sampling = Sampling(_SETTINGS["criterion"])
    for record in records:
        if isinstance(record, dk.AdvantageOutput):
            metrics.update(diagnostics(record, names))
        else:
            signal, keep = record
            sampling.add_signal(signal, keep)
    if sampling.rounds:
        metrics.update(sampling.metrics(trained_responses=result[1].shape[0]))
    return metrics


def _recording(sink: Callable) -> Callable:
    """A wrapper of a trainer method that hands what compute_advantages / dynamic_sample_signal computed in it
    to `sink`."""
    def wrap(original: Callable) -> Callable:
        def method(self, *args, **kwargs):
            records: list = []
            token = _RECORDS.set(records)
            try:
                result = original(self, *args, **kwargs)
            finally:
                _RECORDS.reset(token)
            if records:
                sink(self, _metrics(records, self.reward_func_names, result))
            return result

        return method

    return wrap


def _log_into(training: Callable) -> Callable:
    def sink(trainer, metrics: dict) -> None:
        mode = "train" if training(trainer) else "eval"
        for name, value in metrics.items():
            trainer._metrics[mode][name].append(value)
    return sink


def _hold_for_log(trainer, metrics: dict) -> None:
    """The Ray driver logs what _build_grpo_log_metrics returns for each training step."""
    trainer.__dict__.setdefault("_dara_metrics", {}).update(metrics)


def _hf_compute_std(self, samples, rewards_per_func: torch.Tensor) -> torch.Tensor:
    """GRPOTrainer.compute_std, the signal its _dynamic_sampling keeps rows by (> 0)."""
    if self.dynamic_num_samples:
        raise ValueError("--dynamic_sample with request-aware (multi-turn) grouping is not covered by "
                         "dara_kernels.integrations.swift")
    num_generations = self.num_generations if self.model.training else self.num_generations_eval
    return dynamic_sample_signal(rewards_per_func, self.reward_weights, num_generations)


def _unsupported(what: str) -> Callable:
    def make(original: Callable) -> Callable:
        def unsupported(*args, **kwargs):
            raise ValueError(f"dara_kernels.integrations.swift does not cover {what}")
        return unsupported
    return make


def _checked(original: Callable) -> Callable:
    """A trainer method that reads ms-swift's advantage settings, followed by their check: a value the op cannot
    express stops the trainer's construction, before any rollout."""
    def method(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run_settings(self.advantage_estimator, self.scale_rewards, self.kl_in_reward, getattr(self, "beta", 0.0))
        return result

    return method


def _replacement(function: Callable) -> Callable:
    return lambda original: function


def _import(name: str):
    """The trainer module, or None where a dependency only that trainer needs is missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in _OPTIONAL_DEPENDENCIES.get(name, ()):
            return None
        raise


def patches() -> dict:
    """Each importable trainer module's name -> its patches."""
    found = {}
    hf = _import(_HF)
    found[_HF] = [
        patching.Patch(hf, "compute_advantages", _replacement(compute_advantages)),
        patching.Patch(hf, "compute_advantages_dynamic",
                       _unsupported("request-aware (multi-turn) grouping (compute_advantages_dynamic)")),
        patching.Patch(hf.GRPOTrainer, "_compute_advantages", _recording(_log_into(lambda t: t.model.training))),
        patching.Patch(hf.GRPOTrainer, "_dynamic_sampling", _recording(_log_into(lambda t: True))),
        patching.Patch(hf.GRPOTrainer, "compute_std", _replacement(_hf_compute_std)),
        patching.Patch(hf.GRPOTrainer, "_prepare_algorithm_params", _checked)]
    megatron = _import(_MEGATRON)
    if megatron is not None:
        found[_MEGATRON] = [
            patching.Patch(megatron, "compute_advantages", _replacement(compute_advantages)),
            patching.Patch(megatron.MegatronGRPOTrainer, "_compute_advantages",
                           _recording(_log_into(lambda t: t.unwrapped_models[0].training))),
            # Its _dynamic_sampling computes the weighted sum's std inline: nothing to point elsewhere.
            patching.Patch(megatron.MegatronGRPOTrainer, "_dynamic_sampling",
                           _unsupported("--dynamic_sample on the Megatron trainer"))]
    driver = _import(_RAY)
    if driver is not None:
        found[_RAY] = [
            patching.Patch(driver, "compute_advantages", _replacement(compute_advantages)),
            patching.Patch(driver, "compute_std_for_dynamic_sampling", _replacement(dynamic_sample_signal)),
            patching.Patch(driver.GRPOTrainer, "compute_advantages", _recording(_hold_for_log)),
            patching.Patch(driver.GRPOTrainer, "_dynamic_sampling", _recording(_hold_for_log)),
            patching.Patch(driver.GRPOTrainer, "_prepare_state", _checked),
            patching.Patch(driver.GRPOTrainer, "_build_grpo_log_metrics", lambda original: with_extra_metrics(
                original, lambda self, *_: self.__dict__.pop("_dara_metrics", {})))]
    return found


def install(method: Optional[str] = None, signal: str = "any", **options) -> list:
    """Configure (from the environment when `method` is None) and patch every importable trainer; idempotent.
    Returns the trainer modules patched."""
    if method is None:
        _configure_from_environment()
    else:
        configure(method, signal, **options)
    found = patches()
    for module_patches in found.values():
        patching.install(module_patches)
    return list(found)


def uninstall() -> None:
    for module_patches in patches().values():
        patching.uninstall(module_patches)

