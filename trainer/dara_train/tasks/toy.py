"""The embedded testbed: "ab=" (two digits) -> a reply that starts with the
first digit a, ends with a marker after a digit, and stops early.

Every reward is learnable, and each plays one role of the paper's setting:
- `correct` (1 when the reply starts with a, 0 otherwise, empty replies
  included): answers are uniform over 0..9, so no constant reply beats chance
  (0.1); a recall from the prompt, learnable alongside the other rewards.
- `format` (the reply ends with a digit then the marker, `task.marker`, `#`
  by default): the sparse reward, about 1% of a random model's replies with
  `#`, and indifferent to which digit comes first, so reinforcing it does not
  pull the answer towards one digit. A longer marker makes it sparser.
- `length` (EOS within `task.max_length` tokens): the dense, easy reward. With
  `task.length_shape=gated` only correct replies are credited, which makes it
  sparse and learnable only together with `correct`.

With `task.shift_step=S` the marker is doubled (`#` becomes `##`) at step S:
the learned format reward turns sparse again (the policy now has to discover a
second `#` where it learned to stop) while the others stay learned, so the
rewards' densities shift during training.

Training draws from 80 of the 100 operand pairs; evaluation uses the other 20
(every first digit twice), so it measures the recall on unseen prompts."""
from __future__ import annotations

import random

from ..model import TOY_CHARACTERS
from . import LENGTH_SHAPES, Prompt, Response, Task, chat


def split_pairs(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(training pairs, held-out pairs) of operands 0..n-1: every first digit
    is held out with one second digit (two when n >= 10), a different one each."""
    held = [(a, (3 * a + 1) % n) for a in range(n)]
    if n >= 10:
        held += [(a, (3 * a + 6) % n) for a in range(n)]
    return [(a, b) for a in range(n) for b in range(n) if (a, b) not in held], held


def correct(prompt: Prompt, response: Response) -> float:
    return 1.0 if response.text[:1] == str(prompt.answer) else 0.0


class ToyTask(Task):
    def __init__(self, cfg):
        self.max_length = cfg.max_length
        if cfg.length_shape not in LENGTH_SHAPES:
            raise ValueError(f"task.length_shape={cfg.length_shape!r} is not one of {', '.join(LENGTH_SHAPES)}")
        self.gated = cfg.length_shape == "gated"
        if not cfg.marker or set(cfg.marker) - set(TOY_CHARACTERS) or any(c.isdigit() for c in cfg.marker):
            raise ValueError(f"task.marker={cfg.marker!r} must be non-empty, without digits, made of the tiny "
                             f"model's characters {''.join(TOY_CHARACTERS)!r}")
        self.markers = (cfg.marker, cfg.marker * 2)
        self.shift_step = cfg.shift_step
        self.step = 0
        self.train_pairs, self.eval_pairs = split_pairs(cfg.max_operand + 1)
        self.rewards = {"correct": correct, "format": self.format, "length": self.length}

    def set_step(self, step: int) -> None:
        self.step = step

    @property
    def marker(self) -> str:
        return self.markers[1] if self.shift_step and self.step >= self.shift_step else self.markers[0]

    def format(self, prompt: Prompt, response: Response) -> float:
        text, marker = response.text, self.marker
        marked = text.endswith(marker) and text[:-len(marker)][-1:].isdigit()
        return 1.0 if response.finished and marked else 0.0

    def length(self, prompt: Prompt, response: Response) -> float:
        short = response.finished and response.num_tokens <= self.max_length
        if self.gated:
            short = short and correct(prompt, response) == 1.0
        return 1.0 if short else 0.0

    @staticmethod
    def _prompt(a: int, b: int) -> Prompt:
        return Prompt(chat(f"{a}{b}="), a)

    def sample(self, rng: random.Random, count: int) -> list[Prompt]:
        return [self._prompt(*rng.choice(self.train_pairs)) for _ in range(count)]

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(a, b) for a, b in self.eval_pairs]
