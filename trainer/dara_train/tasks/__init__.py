"""Tasks: prompts plus named reward components. Each reward returns one
column of the [N, K] reward tensor; a response it cannot score gets NaN
(the toy task scores every response). A prompt is chat messages (system, user):
the tokenizer renders them with the model's chat template, or as their plain
concatenation where it has none (trainer/dara_train/model.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Prompt:
    messages: list[dict]     # [{"role": "system" | "user", "content": str}, ...]
    answer: object
    meta: dict = field(default_factory=dict)


def chat(user: str, system: str = "") -> list[dict]:
    """The messages of a prompt: an optional system message, then the user's."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


@dataclass
class Response:
    text: str
    num_tokens: int      # generated tokens, EOS excluded
    finished: bool       # ended with EOS before the token limit


RewardFn = Callable[[Prompt, Response], float]

# task.length_shape: `ungated` credits every response within the length limit,
# `gated` only the correct ones (a length limit paired with correctness).
LENGTH_SHAPES = ("ungated", "gated")


class Task:
    rewards: dict[str, RewardFn]
    # The value at which a reward counts as satisfied in the joint rate (1 for a binary reward; a task
    # names its other rewards' full marks).
    full_marks: dict[str, float] = {}

    def full_mark(self, name: str) -> float:
        return self.full_marks.get(name, 1.0)

    def sample(self, rng, count: int) -> list[Prompt]:
        raise NotImplementedError

    def eval_prompts(self) -> list[Prompt]:
        raise NotImplementedError

    def demonstrations(self, rng, count: int) -> list[tuple[Prompt, str]]:
        """`count` (prompt, reply text) pairs to pre-train on (`pretrain.steps`)."""
        raise NotImplementedError(f"task {type(self).__name__} has no demonstrations to pre-train on "
                                  "(pretrain.steps must be 0)")

    def set_step(self, step: int) -> None:
        """The training step about to be scored, for tasks whose rewards change during training."""

    def eval_metrics(self, prompts: list[Prompt], responses: list[Response]) -> dict:
        """Task-specific held-out metrics beyond each reward's mean, by name (the evaluation adds its prefix);
        `prompts[i]` is the prompt of `responses[i]`."""
        return {}

    def score(self, names: list[str], prompts: list[Prompt], responses: list[Response]) -> torch.Tensor:
        unknown = [n for n in names if n not in self.rewards]
        if unknown:
            raise ValueError(f"unknown reward {unknown} for task {type(self).__name__}; "
                             f"available: {', '.join(self.rewards)}")
        return torch.tensor([[self.rewards[n](p, r) for n in names] for p, r in zip(prompts, responses)],
                            dtype=torch.float32)


def build_task(cfg) -> Task:
    if cfg.name == "toy":
        from .toy import ToyTask

        return ToyTask(cfg)
    if cfg.name == "toy-budget":
        from .toy_budget import ToyBudgetTask

        return ToyBudgetTask(cfg)
    if cfg.name == "math":
        from .math import MathTask

        return MathTask(cfg)
    if cfg.name == "toolcall":
        from .toolcall import ToolCallTask

        return ToolCallTask(cfg)
    raise ValueError(f"task.name={cfg.name!r} is not one of toy, toy-budget, math, toolcall")
