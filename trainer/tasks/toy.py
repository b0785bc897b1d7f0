"""The embedded default task: "a+b=" -> the last digit of a + b.

Rewards: `correct` (first digit of the response is the answer; NaN for an
empty response, which cannot be scored), `format` (the response starts with
'#' and a digit: about 2% of a random model's responses, a sparse reward),
`length` (ended with EOS within task.max_length tokens)."""
from __future__ import annotations

import math
import random

from . import Prompt, Response, Task


def correct(prompt: Prompt, response: Response) -> float:
    if not response.text:
        return math.nan
    digits = [c for c in response.text if c.isdigit()]
    return 1.0 if digits and int(digits[0]) == prompt.answer else 0.0


def marked_answer(prompt: Prompt, response: Response) -> float:
    return 1.0 if len(response.text) >= 2 and response.text[0] == "#" and response.text[1].isdigit() else 0.0


class ToyTask(Task):
    def __init__(self, cfg):
        self.max_length = cfg.max_length
        self.max_operand = cfg.max_operand
        self.eval_size = cfg.eval_size
        self.rewards = {"correct": correct, "format": marked_answer, "length": self.length}

    def length(self, prompt: Prompt, response: Response) -> float:
        return 1.0 if response.finished and response.num_tokens <= self.max_length else 0.0

    @staticmethod
    def _prompt(a: int, b: int) -> Prompt:
        return Prompt(f"{a}+{b}=", (a + b) % 10)

    def sample(self, rng: random.Random, count: int) -> list[Prompt]:
        top = self.max_operand + 1
        return [self._prompt(rng.randrange(top), rng.randrange(top)) for _ in range(count)]

    def eval_prompts(self) -> list[Prompt]:
        top = self.max_operand + 1
        return [self._prompt(a, b) for a in range(top) for b in range(top)][: self.eval_size]
