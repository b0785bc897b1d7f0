"""Training configuration: dataclasses loaded from YAML, overridable with
`--set section.key=value` on the command line."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass
class ModelConfig:
    path: Optional[str] = None          # a local Hugging Face model directory; None builds `tiny`
    hidden_size: int = 64
    layers: int = 2
    heads: int = 2                      # head_dim = hidden_size / heads must be >= 32 for vLLM
    intermediate_size: int = 128
    vocab: str = "toy"                  # tiny model's characters: toy (digits, + = #) | ascii (printable text)
    max_positions: int = 2048
    seed: Optional[int] = None          # tiny model's init; None: the run's `seed`


@dataclass
class TaskConfig:
    name: str = "toy"                   # toy | toy-budget | math | toolcall
    rewards: list = field(default_factory=lambda: ["correct", "format", "length"])
    length_shape: str = "ungated"       # toy, math: ungated | gated (only correct replies earn length)
    max_length: int = 4                 # length compliance: response tokens <= max_length
    min_work: int = 6                   # toy-budget: tokens a hard prompt's right reply needs (> max_length)
    short_share: float = 0.03           # toy-budget: share of the demonstrations that fit the length limit
    max_operand: int = 9                # toy: operands a, b drawn from 0..max_operand
    data_path: Optional[str] = None     # math: optional JSONL of {"question", "answer"}
    eval_size: int = 64
    marker: str = "#"                   # toy: the format reward's end marker (after a digit)
    shift_step: int = 0                 # toy: from this step on the marker is doubled (0: never)
    thresholds: dict = field(default_factory=dict)   # reward -> training mean counted as learned (default 0.8)


@dataclass
class RolloutConfig:
    engine: str = "hf"                  # hf | vllm
    group_size: int = 8
    prompts_per_step: int = 16
    max_new_tokens: int = 6
    temperature: float = 1.0
    top_p: float = 1.0
    dynamic_sampling: str = "off"       # off | any (some reward varies in the group) | sum (the weighted sum varies)
    candidate_groups: int = 0           # dynamic sampling: groups drawn in a step's first round (0: prompts_per_step)
    max_rounds: int = 4                 # dynamic sampling: generation rounds per step at most


@dataclass
class AdvantageConfig:
    method: str = "dara"
    options: dict = field(default_factory=dict)   # any keyword of dara_kernels.fused_advantage


@dataclass
class OptimConfig:
    lr: float = 3e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    mini_batches: int = 1
    clip_ratio: float = 0.2
    clip_low: Optional[float] = None    # the ratio's clip below 1 (1 - clip_low); None: clip_ratio
    clip_high: Optional[float] = None   # the ratio's clip above 1 (1 + clip_high, DAPO's clip-higher); None: clip_ratio
    loss_agg: str = "token-mean"        # token-mean | seq-mean
    kl_coef: float = 0.0                # k3 KL to the frozen initial policy
    entropy_coef: float = 0.0           # bonus on the mean token entropy of the sampling policy


@dataclass
class PretrainConfig:
    steps: int = 0                      # supervised steps on the task's demonstrations before RL (0: none)
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0                       # the demonstrations drawn


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    steps: int = 60
    seed: int = 0
    output_dir: str = "runs/toy"
    save_every: int = 0                 # 0: only at the end
    eval_every: int = 10
    eval_samples: int = 4               # held-out prompts and responses written to samples.jsonl per evaluation
    eval_replies: int = 16              # replies sampled per held-out prompt at each evaluation (0: greedy only)
    tensorboard: bool = False
    report: bool = True                 # end with a summary of what was learned and write curves.png
    mixed_precision: bool = True        # bf16 FSDP2 mixed precision on GPU (ignored on CPU)


def _coerce(value: str, current: Any) -> Any:
    if isinstance(current, bool):
        if value.lower() in ("1", "true", "yes"):
            return True
        if value.lower() in ("0", "false", "no"):
            return False
        raise ValueError(f"expected a boolean, got {value!r}")
    if isinstance(current, (int, float)) and not isinstance(current, bool):
        return type(current)(value)
    if isinstance(current, (list, dict)) or current is None:
        return yaml.safe_load(value)
    return value


def _merge(target, values: dict, where: str) -> None:
    names = {f.name for f in dataclasses.fields(target)}
    for key, value in values.items():
        if key not in names:
            raise ValueError(f"unknown config key {where}{key}; known: {', '.join(sorted(names))}")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ValueError(f"{where}{key} is a section; give a mapping")
            _merge(current, value, f"{where}{key}.")
        else:
            setattr(target, key, value)


def apply_override(config: TrainConfig, assignment: str) -> None:
    if "=" not in assignment:
        raise ValueError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    *path, leaf = key.strip().split(".")
    target = config
    for part in path:
        if not hasattr(target, part) or not dataclasses.is_dataclass(getattr(target, part)):
            raise ValueError(f"unknown config section {part!r} in {key!r}")
        target = getattr(target, part)
    if not hasattr(target, leaf):
        raise ValueError(f"unknown config key {key!r}")
    setattr(target, leaf, _coerce(raw, getattr(target, leaf)))


def load_config(preset: Optional[str] = None, path: Optional[str] = None, overrides=()) -> TrainConfig:
    config = TrainConfig()
    for source in ([CONFIG_DIR / f"{preset}.yaml"] if preset else []) + ([Path(path)] if path else []):
        if not source.exists():
            known = ", ".join(p.stem for p in CONFIG_DIR.glob("*.yaml"))
            raise FileNotFoundError(f"no config {source} (shipped presets: {known})")
        _merge(config, yaml.safe_load(source.read_text()) or {}, "")
    for assignment in overrides:
        apply_override(config, assignment)
    return config


def to_dict(config: TrainConfig) -> dict:
    return dataclasses.asdict(config)
