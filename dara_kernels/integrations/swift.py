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

from . import patching
from .core import advantages, diagnostics, with_extra_metrics
from .core import configure as configure_settings
from .groups import Sampling, check_criterion, decide

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


def configure(method: str = "dara", signal: str = "any", where: str = "dara_kernels.integrations.swift.install",
              **options) -> None:
    """The fused_advantage method and keywords, and the dynamic-sampling criterion, checked now rather than
    at the first step."""
    _SETTINGS.update(settings=configure_settings(method, options, where),
                     criterion=check_criterion(signal, f"{where} signal"))


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
    The method's own normalisation replaces `scale_rewards`; ms-swift's other estimators and a KL term in the
    reward have no equivalent in the op and stop here."""
    settings = _SETTINGS["settings"]
    if advantage_estimator != "grpo":
        raise ValueError(f"--advantage_estimator {advantage_estimator}: with dara_kernels.integrations.swift the "
                         f"advantages are the fused op's {settings.method!r}; drop the plugin for ms-swift's "
                         "own estimators")
    if kl_in_reward and beta != 0.0:
        raise ValueError("--kl_in_reward subtracts a KL term from the summed reward, which the fused op does not "
                         "take: use ms-swift's KL loss (--beta without --kl_in_reward)")
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
        patching.Patch(hf.GRPOTrainer, "compute_std", _replacement(_hf_compute_std))]
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

