"""Reward functions on crafted responses, and BFCL's AST checker on known
pass and fail cases."""
import math

import pytest

from dara_train.config import TaskConfig
from dara_train.tasks import Response


def resp(text, finished=True):
    return Response(text, len(text), finished)


@pytest.fixture
def math_task(tmp_path):
    pytest.importorskip("math_verify")
    from dara_train.tasks.math import MathTask

    data = tmp_path / "problems.jsonl"
    data.write_text('{"question": "What is 2+2?", "answer": "4"}\n')

    def build(shape):
        return MathTask(TaskConfig(name="math", length_shape=shape, max_length=20, data_path=str(data),
                                   eval_size=0))
    return build


def test_math_rewards_and_length_shapes(math_task):
    ungated, gated = math_task("ungated"), math_task("gated")
    p = ungated.sample(__import__("random").Random(0), 1)[0]
    names = ["correct", "format", "length"]
    good = resp("<think>2+2</think><answer>4</answer>")  # 36 characters: over the 20 limit
    assert ungated.score(names, [p], [good])[0].tolist() == [1.0, 1.0, 0.0]
    short_wrong = resp("<answer>5</answer>")
    assert ungated.score(names, [p], [short_wrong])[0].tolist() == [0.0, 0.0, 1.0]
    assert gated.score(names, [p], [short_wrong])[0].tolist() == [0.0, 0.0, 0.0]
    short_right = resp("<answer>4</answer>")
    assert gated.score(names, [p], [short_right])[0].tolist() == [1.0, 0.0, 1.0]
    assert ungated.score(names, [p], [resp("the answer is 4")])[0].tolist()[:2] == [0.0, 0.0]
    assert math.isnan(ungated.score(names, [p], [resp("")])[0, 0].item())


@pytest.fixture(scope="module")
def toolcall_task():
    pytest.importorskip("bfcl_eval")
    from dara_train.tasks.toolcall import ToolCallTask

    return ToolCallTask(TaskConfig(name="toolcall", max_length=400, eval_size=4))


class TestToolCall:

    def first(self, task):
        prompt = task.prompts[0]  # simple_python_0: calculate_triangle_area(base=10, height=5)
        assert prompt.answer == "calculate_triangle_area"
        return prompt

    def test_rewards_on_crafted_responses(self, toolcall_task):
        task = toolcall_task
        p = self.first(task)
        call = '<think>area</think><tool_call>{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}</tool_call>'
        names = ["format", "correct"]
        assert task.score(names, [p], [resp(call)])[0].tolist() == [1.0, 3.0]
        wrong_value = call.replace('"height": 5', '"height": 6')
        assert task.score(names, [p], [resp(wrong_value)])[0].tolist() == [1.0, 2.0]
        wrong_name = call.replace("calculate_triangle_area", "area")
        fmt, correct = task.score(names, [p], [resp(wrong_name)])[0].tolist()
        assert fmt == 0.0 and correct < 3.0
        malformed = '<think>x</think><tool_call>{"name": "calculate_triangle_area", "arguments": {</tool_call>'
        assert task.score(names, [p], [resp(malformed)])[0].tolist() == [0.0, -3.0]
        no_think = '<tool_call>{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}</tool_call>'
        assert task.score(names, [p], [resp(no_think)])[0].tolist() == [0.0, -3.0]
        swapped = '<think>a</think><tool_call>{"arguments": {"base": 10, "height": 5}, "name": "calculate_triangle_area"}</tool_call>'
        assert task.score(names, [p], [resp(swapped)])[0, 0].item() == 0.0
        missing_required = call.replace(', "height": 5', "")
        assert task.score(names, [p], [resp(missing_required)])[0, 0].item() == 0.0
        empty = task.score(names, [p], [resp("")])[0].tolist()
        assert empty[0] == 0.0 and math.isnan(empty[1])

    def test_bfcl_ast_checker_known_cases(self, toolcall_task):
        task = toolcall_task
        from dara_train.tasks.bfcl import ast_check

        entry = self.first(task).meta["entry"]
        assert ast_check(entry, [{"calculate_triangle_area": {"base": 10, "height": 5}}], "simple_python")
        assert ast_check(entry, [{"calculate_triangle_area": {"base": 10, "height": 5, "unit": "units"}}],
                         "simple_python")
        assert not ast_check(entry, [{"calculate_triangle_area": {"base": 10, "height": 7}}], "simple_python")
        assert not ast_check(entry, [{"triangle_area": {"base": 10, "height": 5}}], "simple_python")
        assert not ast_check(entry, [{"calculate_triangle_area": {"base": 10}}], "simple_python")
