"""Math reasoning: problems from reasoning-gym (or a JSONL file of
{"question", "answer"}), correctness checked with math-verify, a format
reward, and length compliance in two shapes (`task.length_shape`):

- `ungated`: every response within task.max_length tokens is credited;
- `gated`: only correct responses within the limit are credited.

The paper's Asym and Sym name DARA's calibration (`advantage.options`
`calibration`), not these shapes."""
from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

from . import LENGTH_SHAPES, Prompt, Response, Task, chat

INSTRUCTION = ("Think step by step inside <think></think>, then give only the final answer "
               "inside <answer></answer>.")
FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(text: str):
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def is_correct(gold: str, predicted: str) -> bool:
    from math_verify import parse, verify

    return bool(verify(parse(str(gold)), parse(predicted)))


def correct(prompt: Prompt, response: Response) -> float:
    if not response.text.strip():
        return math.nan
    predicted = extract_answer(response.text)
    if predicted is None:
        return 0.0
    try:
        return 1.0 if is_correct(prompt.answer, predicted) else 0.0
    except Exception:  # a verifier failure is "cannot score", not "wrong"
        return math.nan


def well_formed(prompt: Prompt, response: Response) -> float:
    return 1.0 if FORMAT.match(response.text) else 0.0


class MathTask(Task):
    def __init__(self, cfg):
        if cfg.length_shape not in LENGTH_SHAPES:
            raise ValueError(f"task.length_shape={cfg.length_shape!r} is not one of {', '.join(LENGTH_SHAPES)}")
        self.cfg = cfg
        self.rewards = {"correct": correct, "format": well_formed, "length": self.length}
        self._pool = self._load(cfg)

    def length(self, prompt: Prompt, response: Response) -> float:
        within = response.finished and response.num_tokens <= self.cfg.max_length
        if self.cfg.length_shape == "gated":
            score = correct(prompt, response)
            if math.isnan(score):
                return math.nan
            return 1.0 if within and score == 1.0 else 0.0
        return 1.0 if within else 0.0

    @staticmethod
    def _load(cfg) -> list[Prompt]:
        if cfg.data_path:
            rows = [json.loads(line) for line in Path(cfg.data_path).read_text().splitlines() if line.strip()]
            return [Prompt(chat(r["question"], INSTRUCTION), str(r["answer"])) for r in rows]
        import reasoning_gym

        data = reasoning_gym.create_dataset("basic_arithmetic", size=2000 + cfg.eval_size, seed=1234)
        return [Prompt(chat(item["question"], INSTRUCTION), str(item["answer"])) for item in data]

    def sample(self, rng: random.Random, count: int) -> list[Prompt]:
        train = self._pool[self.cfg.eval_size:]
        return [train[rng.randrange(len(train))] for _ in range(count)]

    def eval_prompts(self) -> list[Prompt]:
        return self._pool[: self.cfg.eval_size]
