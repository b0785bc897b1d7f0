"""A length budget that competes with correctness (the paper's math regime in
miniature): "abc=" (three digits) -> the answer a, then its work, then the
marker. The policy starts from a model pre-trained on this task's own
demonstrations (`pretrain`), whose replies are mostly over the length limit,
as a reasoning model's are.

- `correct`: the reply finishes and starts with a; on a hard prompt (c = 0,
  a tenth of the prompts) it must also be at least `task.min_work` tokens
  long, longer than the length limit: there every reply within the limit is
  wrong, as a shortened solution of a hard problem.
- `format`: the reply finishes with the marker `#` after its work.
- `length`: the reply finishes within `task.max_length` tokens.

Demonstrations: the answer (right 60% of the time, else a uniform digit),
then `x` work tokens, more than the limit allows except in a share
`task.short_share` of them (default 3%), then the marker half the time:
the pre-trained policy starts right on about half of the prompts and marks
about half of its replies, while few fit the limit (toy-budget) or, with a
larger short share, about as many as the share (toy-length-dense).

Training draws from 800 of the 1,000 triples; evaluation uses the other 200
(those whose digits sum to a multiple of 5; 20 of them hard)."""
from __future__ import annotations

import random

from . import Prompt, Response, Task, chat

WORK = "x"
MARKER = "#"
HARD_DIGIT = 0          # c = HARD_DIGIT marks a hard prompt
# Demonstrations: the share with the right answer, the share with the marker, and the work lengths.
RIGHT_SHARE = 0.6
MARKED_SHARE = 0.5
SHORT_SHARE = 0.03      # task.short_share's default: work short enough for the limit; the rest draw LONG_WORK
                        # more tokens than the limit
LONG_WORK = 6


def split_triples() -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(training triples, held-out triples): held out are those whose digits sum to a multiple of 5."""
    triples = [(a, b, c) for a in range(10) for b in range(10) for c in range(10)]
    return [t for t in triples if sum(t) % 5], [t for t in triples if sum(t) % 5 == 0]


class ToyBudgetTask(Task):
    def __init__(self, cfg):
        if cfg.min_work <= cfg.max_length:
            raise ValueError(f"task.min_work={cfg.min_work} must exceed task.max_length={cfg.max_length}: a hard "
                             "prompt's right reply is one the length limit does not allow")
        if not 0 <= cfg.short_share <= 1:
            raise ValueError(f"task.short_share={cfg.short_share} is a share of the demonstrations: 0 to 1")
        self.max_length, self.min_work, self.short_share = cfg.max_length, cfg.min_work, cfg.short_share
        self.train_triples, self.eval_triples = split_triples()
        self.rewards = {"correct": self.correct, "format": self.format, "length": self.length}

    @staticmethod
    def hard(prompt: Prompt) -> bool:
        return prompt.meta["hard"]

    def correct(self, prompt: Prompt, response: Response) -> float:
        right = response.finished and response.text[:1] == str(prompt.answer)
        long_enough = not self.hard(prompt) or response.num_tokens >= self.min_work
        return 1.0 if right and long_enough else 0.0

    @staticmethod
    def format(prompt: Prompt, response: Response) -> float:
        return 1.0 if response.finished and response.text.endswith(MARKER) and len(response.text) > 1 else 0.0

    def length(self, prompt: Prompt, response: Response) -> float:
        return 1.0 if response.finished and response.num_tokens <= self.max_length else 0.0

    @staticmethod
    def _prompt(a: int, b: int, c: int) -> Prompt:
        return Prompt(chat(f"{a}{b}{c}="), a, {"hard": c == HARD_DIGIT})

    def sample(self, rng: random.Random, count: int) -> list[Prompt]:
        return [self._prompt(*rng.choice(self.train_triples)) for _ in range(count)]

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(*t) for t in self.eval_triples]

    def demonstrations(self, rng: random.Random, count: int) -> list[tuple[Prompt, str]]:
        out = []
        for _ in range(count):
            prompt = self._prompt(*rng.choice(self.train_triples))
            short = self.max_length - 2   # work tokens that leave room for the answer and the marker
            work = (rng.randrange(short + 1) if rng.random() < self.short_share
                    else self.max_length + rng.randrange(LONG_WORK))
            answer = prompt.answer if rng.random() < RIGHT_SHARE else rng.randrange(10)
            out.append((prompt, str(answer) + WORK * work + (MARKER if rng.random() < MARKED_SHARE else "")))
        return out

    def eval_metrics(self, prompts: list[Prompt], responses: list[Response]) -> dict:
        """`correct` on the hard and on the other prompts apart (the accuracy the limit can cost)."""
        out = {}
        for name, keep in (("correct_hard", True), ("correct_easy", False)):
            scores = [self.correct(p, r) for p, r in zip(prompts, responses) if self.hard(p) == keep]
            out[name] = sum(scores) / len(scores) if scores else float("nan")
        return out
