"""The toy testbed's rewards on crafted replies, its held-out split, and its
variants (length gated on correctness, another marker, a shifting marker)."""
import random

import pytest

from dara_train.config import TaskConfig
from dara_train.tasks import Prompt, Response, chat
from dara_train.tasks.toy import ToyTask

NAMES = ["correct", "format", "length"]


def reply(text, finished=True):
    return Response(text, len(text), finished)


def scorer(**task_options):
    task = ToyTask(TaskConfig(name="toy", max_length=3, **task_options))
    prompt = Prompt(chat("37="), 3)
    return task, lambda text, finished=True: task.score(NAMES, [prompt], [reply(text, finished)])[0].tolist()


def test_rewards_on_crafted_replies():
    _, score = scorer()
    assert score("3#") == [1.0, 1.0, 1.0]
    assert score("5#") == [0.0, 1.0, 1.0]      # format does not care which digit
    assert score("3") == [1.0, 0.0, 1.0]
    assert score("37#") == [1.0, 1.0, 1.0]
    assert score("#") == [0.0, 0.0, 1.0]       # the marker needs a digit before it
    assert score("3##") == [1.0, 0.0, 1.0]
    assert score("3xy4#") == [1.0, 1.0, 0.0]   # too long
    assert score("3#", finished=False) == [1.0, 0.0, 0.0]
    assert score("") == [0.0, 0.0, 1.0]        # empty: scored, not NaN, and not correct


def test_gated_length_credits_only_correct_replies():
    _, score = scorer(length_shape="gated")
    assert score("3#") == [1.0, 1.0, 1.0]
    assert score("5#") == [0.0, 1.0, 0.0]
    assert score("") == [0.0, 0.0, 0.0]
    for old_name in ("asymmetric", "symmetric"):
        with pytest.raises(ValueError, match="length_shape"):
            ToyTask(TaskConfig(name="toy", length_shape=old_name))


def test_marker_option_and_its_shift():
    task, score = scorer(marker="x#", shift_step=5)
    assert score("3x#") == [1.0, 1.0, 1.0]
    assert score("3#")[1] == 0.0 and score("3xx#")[1] == 0.0
    task.set_step(5)
    assert score("3x#x#")[1] == 1.0 and score("3x#")[1] == 0.0
    for bad in ("", "1#", "!"):
        with pytest.raises(ValueError, match="task.marker"):
            ToyTask(TaskConfig(name="toy", marker=bad))


def test_marker_shifts_at_shift_step():
    task, score = scorer(shift_step=60)
    task.set_step(59)
    assert score("3#")[1] == 1.0 and score("3##")[1] == 0.0
    task.set_step(60)
    assert score("3#")[1] == 0.0 and score("3##")[1] == 1.0
    assert score("##")[1] == 0.0


def test_held_out_prompts_are_disjoint_and_no_constant_beats_chance():
    task = ToyTask(TaskConfig(name="toy"))
    held = task.eval_prompts()
    trained = {p.messages[-1]["content"] for p in task.sample(random.Random(0), 5000)}
    assert len(held) == 20 and len(trained) == 80
    assert not trained & {p.messages[-1]["content"] for p in held}
    for prompts in (held, [task._prompt(a, b) for a, b in task.train_pairs]):
        for digit in range(10):
            accuracy = task.score(["correct"], prompts, [reply(f"{digit}#")] * len(prompts)).mean().item()
            assert accuracy == pytest.approx(0.1)
