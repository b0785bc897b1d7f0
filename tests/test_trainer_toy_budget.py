"""The toy-budget testbed's rewards on crafted replies (a hard prompt's right reply needs more tokens than the
length limit), its held-out split, its demonstrations, and the pre-training on them."""
import random

import pytest

from dara_train.config import PretrainConfig, TaskConfig
from dara_train.tasks import Response
from dara_train.tasks.toy_budget import ToyBudgetTask

NAMES = ["correct", "format", "length"]


def task():
    return ToyBudgetTask(TaskConfig(name="toy-budget", max_length=4, min_work=6))


def score(prompt, text, finished=True):
    return task().score(NAMES, [prompt], [Response(text, len(text), finished)])[0].tolist()


def test_rewards_on_crafted_replies():
    easy, hard = ToyBudgetTask._prompt(3, 7, 5), ToyBudgetTask._prompt(3, 7, 0)
    assert score(easy, "3xx#") == [1.0, 1.0, 1.0]
    assert score(easy, "3xxxxxx#") == [1.0, 1.0, 0.0]     # over the limit of 4 tokens
    assert score(easy, "5x#") == [0.0, 1.0, 1.0]
    assert score(easy, "3xx") == [1.0, 0.0, 1.0]
    assert score(easy, "#") == [0.0, 0.0, 1.0]            # the marker needs a reply before it
    assert score(easy, "3xx#", finished=False) == [0.0, 0.0, 0.0]
    assert score(hard, "3xx#") == [0.0, 1.0, 1.0]         # within the limit, so too short to be right
    assert score(hard, "3xxxx#") == [1.0, 1.0, 0.0]       # min_work = 6 tokens
    assert score(hard, "3xxx#") == [0.0, 1.0, 0.0]
    assert task().eval_metrics([easy, hard, hard], [Response(t, len(t), True) for t in ("3x#", "3xxxx#", "3#")]) \
        == {"correct_hard": 0.5, "correct_easy": 1.0}
    with pytest.raises(ValueError, match="must exceed task.max_length"):
        ToyBudgetTask(TaskConfig(name="toy-budget", max_length=4, min_work=4))


def test_split_and_demonstrations():
    t = task()
    held = {p.messages[-1]["content"] for p in t.eval_prompts()}
    drawn = {p.messages[-1]["content"] for p in t.sample(random.Random(0), 2000)}
    assert len(held) == 200 and not held & drawn and len(t.train_triples) == 800
    assert sum(p.meta["hard"] for p in t.eval_prompts()) == 20
    demos = t.demonstrations(random.Random(1), 2000)
    assert demos == t.demonstrations(random.Random(1), 2000)
    within = sum(len(reply) <= 4 for _, reply in demos) / len(demos)
    assert 0.01 < within < 0.05                           # mostly over the limit
    right = sum(reply[0] == str(p.answer) for p, reply in demos) / len(demos)
    assert 0.6 < right < 0.7


def test_pretraining_is_deterministic_and_learns_the_demonstrations():
    pytest.importorskip("transformers")
    import torch

    from dara_train.config import ModelConfig
    from dara_train.model import build_policy
    from dara_train.pretrain import demonstration_batch, pretrain

    t = task()
    model, tokenizer = build_policy(ModelConfig(), 0)
    ids, labels, attention = demonstration_batch(tokenizer, [(t._prompt(3, 7, 5), "3xx#")])
    assert tokenizer.decode_as_seen(ids[0].tolist()) == "<bos>375=3xx#<eos>"
    assert (labels[0] != -100).tolist() == [False] * 5 + [True] * 5
    cfg = PretrainConfig(steps=3, batch_size=8, lr=3e-3, seed=0)
    weights = []
    for _ in range(2):
        model, _ = build_policy(ModelConfig(), 0)
        before = pretrain(model, tokenizer, t, PretrainConfig(steps=1, batch_size=8, lr=0.0, seed=0))["pretrain/loss"]
        after = pretrain(model, tokenizer, t, cfg)["pretrain/loss"]
        weights.append(model.state_dict())
    assert after < before
    for name in weights[0]:
        torch.testing.assert_close(weights[0][name], weights[1][name], rtol=0, atol=0)


# sha256 of repr([(prompt text, reply)]) of 2,000 demonstrations drawn with random.Random(1), by the task before
# task.short_share existed (ed4bc8d): its default must leave toy-budget's demonstrations, so its runs, unchanged.
DEMONSTRATIONS_BEFORE_SHORT_SHARE = "04772d4b21fb654c4853881841fc3d6b5838e68ac89fc460f9c58a1dc083e856"


def demonstration_digest(t, count=2000):
    import hashlib

    demos = t.demonstrations(random.Random(1), count)
    return hashlib.sha256(repr([(p.messages[-1]["content"], r) for p, r in demos]).encode()).hexdigest()


def test_short_share_default_keeps_the_demonstrations_and_sets_the_share_within_the_limit():
    assert TaskConfig().short_share == 0.03
    assert demonstration_digest(task()) == DEMONSTRATIONS_BEFORE_SHORT_SHARE
    for share in (0.0, 0.5, 1.0):
        t = ToyBudgetTask(TaskConfig(name="toy-budget", max_length=4, min_work=6, short_share=share))
        demos = t.demonstrations(random.Random(1), 4000)
        within = sum(len(reply) <= 4 for _, reply in demos) / len(demos)
        assert abs(within - share) < 0.03, (share, within)
        # Only the work's length changes: the answer is right as often.
        right = sum(reply[0] == str(p.answer) for p, reply in demos) / len(demos)
        assert 0.6 < right < 0.7
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="task.short_share"):
            ToyBudgetTask(TaskConfig(name="toy-budget", max_length=4, min_work=6, short_share=bad))


def test_toy_length_dense_preset():
    """The preset of issue 39's testbed in the paper's regime: correct and length only, half the demonstrations
    within the limit, groups of 16 at toy-budget's replies per step, entropy 0, clip 0.2 / 0.28, dynamic sampling
    on the summed reward at 3 candidate groups per 2 accepted; the rest as toy-budget."""
    from dara_train.config import load_config

    dense, budget = load_config("toy-length-dense"), load_config("toy-budget")
    assert dense.task.name == "toy-budget" and dense.task.rewards == ["correct", "length"]
    assert dense.task.short_share == 0.55 and budget.task.short_share == 0.03
    assert (dense.rollout.group_size, dense.rollout.prompts_per_step) == (16, 32)
    assert dense.rollout.group_size * dense.rollout.prompts_per_step == \
        budget.rollout.group_size * budget.rollout.prompts_per_step
    assert dense.rollout.dynamic_sampling == "sum"
    assert dense.rollout.candidate_groups * 2 == dense.rollout.prompts_per_step * 3
    assert (dense.optim.entropy_coef, dense.optim.clip_low, dense.optim.clip_high) == (0.0, 0.2, 0.28)
    assert (budget.optim.clip_low, budget.optim.clip_high) == (None, None)
    assert dense.pretrain == budget.pretrain and dense.model == budget.model
    assert (dense.task.max_length, dense.task.min_work) == (budget.task.max_length, budget.task.min_work)
