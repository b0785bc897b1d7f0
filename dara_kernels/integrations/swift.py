"""ms-swift integration (tested with ms-swift 4.6.0: the GRPO trainer and the Ray driver's GRPO trainer).

In the plugin file given to `swift rlhf --rlhf_type grpo --external_plugins plugin.py` (where custom reward
functions are registered too):

    import dara_kernels.integrations.swift   # the method and options from DARA_SWIFT_METHOD / DARA_SWIFT_OPTIONS

or, in Python, `dara_kernels.integrations.swift.configure("dara", alpha=0.5)`.

ms-swift has no estimator registry: each of its GRPO trainers calls the pure function
`swift.rl_core.advantage.compute_advantages` on the gathered `rewards_per_func` [N, K] (one column per
`--reward_funcs`, `--reward_weights` as b_k, `--num_generations` per group). Importing this module points the
name `compute_advantages` in each trainer's module at `compute_advantages` below, which calls the fused op,
and wraps the trainer method that calls it so that the op's diagnostics (density, weight, energy per reward)
join that trainer's logged metrics:

| trainer | method wrapped | metrics go to |
| --- | --- | --- |
| `swift.rlhf_trainers.grpo_trainer.GRPOTrainer` | `_compute_advantages` | `self._metrics[mode]` |
| `swift.megatron.trainers.grpo_trainer.MegatronGRPOTrainer` | `_compute_advantages` | `self._metrics[mode]` |
| `swift.ray.megatron.grpo_trainer.GRPOTrainer` | `compute_advantages` | `_build_grpo_log_metrics`'s dict |

A trainer whose module cannot be imported here (Megatron needs megatron-core and transformer_engine, the
Ray driver needs ray) cannot run here either and is left alone. `--dynamic_sample` keeps a group when any
reward varies in it (`groups.group_signal`), where ms-swift keeps it only when the weighted sum varies.
"""
from __future__ import annotations

import contextvars
import importlib
import json
import os
from typing import Callable, Optional

import torch

import dara_kernels as dk
from dara_kernels.integrations.common import check_options, diagnostics, with_extra_metrics
from dara_kernels.integrations.groups import group_signal

METHOD_ENV = "DARA_SWIFT_METHOD"
OPTIONS_ENV = "DARA_SWIFT_OPTIONS"
RESCUED = "dara/dynamic_sample/groups_kept_by_a_reward"

_HF = "swift.rlhf_trainers.grpo_trainer"
_MEGATRON = "swift.megatron.trainers.grpo_trainer"
_RAY = "swift.ray.megatron.grpo_trainer"
# What a trainer module needs that this environment may lack; any other missing module is an error.
_OPTIONAL_DEPENDENCIES = {_MEGATRON: {"megatron", "mcore_bridge", "transformer_engine"}, _RAY: {"ray"}}

_SETTINGS: dict = {}
# While a wrapped trainer method runs: what compute_advantages and the dynamic-sampling signal computed in it.
_RECORDS: contextvars.ContextVar = contextvars.ContextVar("dara_swift_records", default=None)


def configure(method: str = "dara", **options) -> None:
    """The fused_advantage method and keywords the plugin uses (by default: DARA_SWIFT_METHOD, default "dara",
    and DARA_SWIFT_OPTIONS, a JSON object of keywords), checked now rather than at the first step."""
    _SETTINGS.update(method=method, options=check_options(method, options, "dara_kernels.integrations.swift"))


def _configure_from_environment() -> None:
    text = os.environ.get(OPTIONS_ENV, "{}")
    try:
        options = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{OPTIONS_ENV} must be a JSON object of fused_advantage keywords: {err}") from None
    if not isinstance(options, dict):
        raise ValueError(f"{OPTIONS_ENV} must be a JSON object of fused_advantage keywords, got {text!r}")
    configure(os.environ.get(METHOD_ENV, "dara"), **options)


def compute_advantages(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor, num_generations: int,
                       advantage_estimator: str = "grpo", scale_rewards: str = "group", kl_in_reward: bool = False,
                       beta: float = 0.0, kl_values: Optional[torch.Tensor] = None):
    """ms-swift's compute_advantages, computed by the fused op: (advantages [N], weighted rewards [N]).
    The method's own normalisation replaces `scale_rewards`; ms-swift's other estimators and a KL term in the
    reward have no equivalent in the op and stop here."""
    if advantage_estimator != "grpo":
        raise ValueError(f"--advantage_estimator {advantage_estimator}: with dara_kernels.integrations.swift the "
                         f"advantages are the fused op's {_SETTINGS['method']!r}; drop the plugin for ms-swift's "
                         "own estimators")
    if kl_in_reward and beta != 0.0:
        raise ValueError("--kl_in_reward subtracts a KL term from the summed reward, which the fused op does not "
                         "take: use ms-swift's KL loss (--beta without --kl_in_reward)")
    if rewards_per_func.shape[1] == 0:
        raise ValueError("the fused op needs --reward_funcs (rewards_per_func has no column)")
    out = dk.fused_advantage(rewards_per_func.float(), group_size=num_generations, method=_SETTINGS["method"],
                             reward_weights=reward_weights.to(rewards_per_func.device), **_SETTINGS["options"])
    records = _RECORDS.get()
    if records is not None:
        records.append(out)
    weighted = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)  # ms-swift's reward metrics use it
    return out.advantages.to(rewards_per_func.device), weighted


def dynamic_sample_signal(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor,
                          num_generations: int) -> torch.Tensor:
    """In place of ms-swift's per-row std of the weighted sum, which `--dynamic_sample` keeps where > 0:
    1 for the rows of groups where some reward (or the weighted sum) varies, else 0."""
    groups = torch.arange(rewards_per_func.shape[0]) // num_generations
    signal = group_signal(rewards_per_func, groups, reward_weights.tolist())
    records = _RECORDS.get()
    if records is not None:
        records.append(signal)
    # ms-swift's std is 0 for a group of one: such a group is dropped, here too.
    return signal.keep_rows(keep_singletons=False).to(rewards_per_func.device, rewards_per_func.dtype)


def _metrics(records: list, names) -> dict:
    metrics: dict = {}
    for record in records:
        if isinstance(record, dk.AdvantageOutput):
            metrics.update(diagnostics(record, names))
        else:
            metrics[RESCUED] = metrics.get(RESCUED, 0.0) + record.rescued  # summed over resampling rounds
    return metrics


def _recording(original: Callable, sink: Callable) -> Callable:
    """A trainer method that hands what compute_advantages / dynamic_sample_signal computed in it to `sink`."""
    def method(self, *args, **kwargs):
        records: list = []
        token = _RECORDS.set(records)
        try:
            result = original(self, *args, **kwargs)
        finally:
            _RECORDS.reset(token)
        if records:
            sink(self, _metrics(records, self.reward_func_names))
        return result

    method.__wrapped__ = original
    method.__doc__ = original.__doc__
    return method


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


def _replaced_by(replacement: Callable) -> Callable:
    def wrapper(original: Callable) -> Callable:
        replacement.__wrapped__ = original
        return replacement
    return wrapper


def _unsupported(what: str) -> Callable:
    def unsupported(*args, **kwargs):
        raise ValueError(f"dara_kernels.integrations.swift does not cover {what}")
    return unsupported


def _import(name: str):
    """The trainer module, or None where a dependency only that trainer needs is missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in _OPTIONAL_DEPENDENCIES.get(name, ()):
            return None
        raise


def _wrap(cls, name: str, wrapper: Callable) -> None:
    """cls.name = wrapper(cls.name), once (ms-swift's own decorators set __wrapped__ too: a marker of ours)."""
    original = getattr(cls, name)
    if not getattr(original, "_dara", False):
        wrapped = wrapper(original)
        wrapped._dara = True
        setattr(cls, name, wrapped)


def install() -> list:
    """Idempotent. Returns the trainer modules it patched."""
    patched = []
    hf = _import(_HF)
    hf.compute_advantages = compute_advantages
    hf.compute_advantages_dynamic = _unsupported("request-aware (multi-turn) grouping (compute_advantages_dynamic)")
    _wrap(hf.GRPOTrainer, "_compute_advantages", lambda m: _recording(m, _log_into(lambda t: t.model.training)))
    _wrap(hf.GRPOTrainer, "_dynamic_sampling", lambda m: _recording(m, _log_into(lambda t: True)))
    _wrap(hf.GRPOTrainer, "compute_std", _replaced_by(_hf_compute_std))
    patched.append(_HF)
    megatron = _import(_MEGATRON)
    if megatron is not None:
        megatron.compute_advantages = compute_advantages
        _wrap(megatron.MegatronGRPOTrainer, "_compute_advantages",
              lambda m: _recording(m, _log_into(lambda t: t.unwrapped_models[0].training)))
        # Its _dynamic_sampling computes the weighted sum's std inline: nothing to point elsewhere.
        megatron.MegatronGRPOTrainer._dynamic_sampling = _unsupported("--dynamic_sample on the Megatron trainer")
        patched.append(_MEGATRON)
    driver = _import(_RAY)
    if driver is not None:
        driver.compute_advantages = compute_advantages
        driver.compute_std_for_dynamic_sampling = dynamic_sample_signal
        _wrap(driver.GRPOTrainer, "compute_advantages", lambda m: _recording(m, _hold_for_log))
        _wrap(driver.GRPOTrainer, "_dynamic_sampling", lambda m: _recording(m, _hold_for_log))
        _wrap(driver.GRPOTrainer, "_build_grpo_log_metrics",
              lambda m: with_extra_metrics(m, lambda self, *_: self.__dict__.pop("_dara_metrics", {})))
        patched.append(_RAY)
    return patched


_configure_from_environment()
PATCHED = install()
