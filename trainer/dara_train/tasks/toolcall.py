"""Tool calling on BFCL v4 (`simple_python` by default), data and ground
truth from the bfcl-eval package.

The response format: a reasoning block, then one JSON tool call block:
    <think>...</think>
    <tool_call>{"name": "...", "arguments": {...}}</tool_call>
Rewards: `format` (binary: both blocks in that order, valid JSON with "name"
then "arguments", every required parameter of the named function present),
`correct` in [-3, 3] (tool name +-1, parameter names +-1 scaled by their
overlap, parameter values +-1 scaled by the share that matches a possible
answer; NaN for an empty response) and `length` compliance. Held-out
evaluation uses BFCL's own AST checker."""
from __future__ import annotations

import json
import math
import random
import re

from . import Prompt, Response, Task, chat
from .bfcl import ast_check, load_category

CATEGORY = "simple_python"
BLOCKS = re.compile(r"^\s*<think>(.*?)</think>\s*<tool_call>(.*?)</tool_call>\s*$", re.DOTALL)


def parse_call(text: str):
    """(name, arguments) of the response's tool call, or None."""
    match = BLOCKS.match(text)
    if not match:
        return None
    try:
        call = json.loads(match.group(2))
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or list(call)[:2] != ["name", "arguments"]:
        return None
    if not isinstance(call["name"], str) or not isinstance(call["arguments"], dict):
        return None
    return call["name"], call["arguments"]


def _expected(entry: dict):
    (name, params), = entry["ground_truth"][0].items()
    return name, params


def _matches(value, possible: list) -> bool:
    return any(value == p or (isinstance(p, (int, float)) and isinstance(value, (int, float))
                              and not isinstance(value, bool) and float(value) == float(p))
               for p in possible if p != "")


def format_reward(prompt: Prompt, response: Response) -> float:
    call = parse_call(response.text)
    if call is None:
        return 0.0
    name, arguments = call
    functions = {f["name"]: f for f in prompt.meta["entry"]["function"]}
    if name not in functions:
        return 0.0
    required = functions[name]["parameters"].get("required", [])
    return 1.0 if all(r in arguments for r in required) else 0.0


def correctness_reward(prompt: Prompt, response: Response) -> float:
    if not response.text.strip():
        return math.nan
    call = parse_call(response.text)
    if call is None:
        return -3.0
    name, arguments = call
    gold_name, params = _expected(prompt.meta["entry"])
    score = 1.0 if name == gold_name else -1.0
    needed = {k for k, v in params.items() if "" not in v}
    allowed = set(params)
    given = set(arguments)
    union = given | needed
    overlap = len(given & allowed & union) / len(union) if union else 1.0
    score += 2.0 * overlap - 1.0
    scored = needed | (given & allowed)
    right = sum(1 for k in scored if k in arguments and _matches(arguments[k], params[k]))
    score += 2.0 * (right / len(scored) if scored else 1.0) - 1.0
    return score


def messages(entry: dict) -> list[dict]:
    """The tools and the answer format as the system message, BFCL's question as the user's."""
    tools = json.dumps(entry["function"], ensure_ascii=True)
    system = ("You can call these tools:\n" + tools + "\nAnswer with <think>your reasoning</think> then "
              "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.")
    return chat(entry["question"][0][-1]["content"], system)


class ToolCallTask(Task):
    full_marks = {"correct": 3.0}

    def __init__(self, cfg):
        self.cfg = cfg
        entries = load_category(CATEGORY)
        self.prompts = [Prompt(messages(e), _expected(e)[0], {"entry": e}) for e in entries]
        self.rewards = {"format": format_reward, "correct": correctness_reward, "length": self.length}

    def length(self, prompt: Prompt, response: Response) -> float:
        return 1.0 if response.finished and response.num_tokens <= self.cfg.max_length else 0.0

    def sample(self, rng: random.Random, count: int) -> list[Prompt]:
        train = self.prompts[self.cfg.eval_size:]
        return [train[rng.randrange(len(train))] for _ in range(count)]

    def eval_prompts(self) -> list[Prompt]:
        return self.prompts[: self.cfg.eval_size]

    def eval_metrics(self, prompts: list[Prompt], responses: list[Response]) -> dict:
        passed = 0
        for prompt, response in zip(prompts, responses):
            call = parse_call(response.text)
            if call is not None and ast_check(prompt.meta["entry"], [{call[0]: call[1]}], CATEGORY):
                passed += 1
        return {"bfcl_ast_accuracy": passed / max(len(prompts), 1)}
