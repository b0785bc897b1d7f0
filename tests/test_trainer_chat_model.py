"""`model.path` with a chat model (tests/chat_model.py: a tiny Qwen2 with tied embeddings and a trained BPE
tokenizer with a ChatML template): the prompt the model sees is its chat template's, the generation config's
stop tokens end a response, each engine samples from the policy and, after a weight sync, from the updated
one; the math and toolcall presets run through it on both engines, on one and two ranks."""
import copy
import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("reasoning_gym")
pytest.importorskip("bfcl_eval")
from tests.chat_model import CHATML, build_chat_model  # noqa: E402
from tests.trainer_helpers import run_two_steps  # noqa: E402

QUESTIONS = ["Calculate 3 + 4.", "Find the area of a triangle with a base of 10 units and height of 5 units.",
             "Calculate -7 + -6 * -9.", "What is 12 / 4?"]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("chat-model"))


@pytest.fixture(scope="module")
def tokenizer(chat_model):
    from dara_train.model import HFTokenizer

    return HFTokenizer(str(chat_model))


def special(tokenizer, token: str) -> int:
    return tokenizer.inner.convert_tokens_to_ids(token)


def test_prompt_is_the_chat_template_with_the_generation_prompt(tokenizer):
    from dara_train.tasks import chat

    seen = tokenizer.decode_as_seen(tokenizer.encode_prompt(chat("What is 2+2?", "Answer briefly.")))
    assert seen == ("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    # The tokenizer's EOS is <|endoftext|>; <|im_end|> comes from generation_config.json.
    assert tokenizer.eos_token_id == special(tokenizer, "<|endoftext|>")
    assert tokenizer.stop_token_ids == [special(tokenizer, "<|im_end|>"), special(tokenizer, "<|endoftext|>")]


def test_a_reasoning_block_the_template_opens_is_read_as_the_replys(tokenizer, tmp_path):
    """DeepSeek-R1-Distill's generation prompt ends with "<think>\\n": the format rewards must see it."""
    from dara_train.model import HFTokenizer
    from dara_train.rollout import Generation
    from dara_train.tasks.math import well_formed
    from dara_train.train import to_responses

    assert tokenizer.reply_prefix == ""
    inner = copy.deepcopy(tokenizer.inner)
    inner.chat_template = CHATML.replace("assistant\n", "assistant\n<think>\n")
    inner.save_pretrained(tmp_path)
    opened = HFTokenizer(str(tmp_path))
    assert opened.reply_prefix == "<think>\n"
    reply = opened.inner.encode("2 + 2 = 4</think><answer>4</answer>", add_special_tokens=False)
    (response,) = to_responses(opened, [Generation(0, reply + [opened.stop_token_ids[0]], True, [])])
    assert response.text == "<think>\n2 + 2 = 4</think><answer>4</answer>" and response.num_tokens == len(reply)
    assert well_formed(None, response) == 1.0


def test_a_model_without_a_chat_template_sees_the_plain_text():
    from dara_train.model import ASCII_CHARACTERS, CharTokenizer
    from dara_train.tasks import chat

    tokenizer = CharTokenizer(ASCII_CHARACTERS)
    assert tokenizer.encode_prompt(chat("37=")) == tokenizer.encode("37=")
    assert tokenizer.decode_as_seen(tokenizer.encode_prompt(chat("2+2?", "Think."))) == "<bos>Think.\n2+2?"


def max_logprob_gap(model, tokenizer, prompt_ids, generations) -> float:
    """Largest |engine - model| log-probability of a sampled token."""
    from dara_train.ppo import token_logprobs
    from dara_train.train import build_batch

    ids, attention, response, sampled = build_batch(prompt_ids, generations, tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        logp = token_logprobs(model, ids, attention)
    return ((logp - sampled).abs() * response).max().item()


def engine_for(name, chat_model, policy, tokenizer):
    from dara_train.rollout import HFEngine, VLLMEngine

    if name == "hf":
        return HFEngine(policy, tokenizer)
    pytest.importorskip("vllm")
    return VLLMEngine(chat_model, tokenizer, seed=0, max_model_len=1024)


@pytest.mark.parametrize("name", ["hf", "vllm"])
def test_engine_samples_the_policy_stops_at_the_models_end_tokens_and_follows_a_sync(chat_model, tokenizer, name):
    from dara_train.config import ModelConfig
    from dara_train.model import build_policy
    from dara_train.tasks import chat

    policy, _ = build_policy(ModelConfig(path=str(chat_model)))
    engine = engine_for(name, chat_model, policy, tokenizer)
    try:
        prompts = [tokenizer.encode_prompt(chat(q)) for q in QUESTIONS]
        generations = engine.generate(prompts, 16, 32, 1.0, 1.0, seed=3)
        stops = set(tokenizer.stop_token_ids)
        for g in generations:
            assert not stops & set(g.token_ids[:-1]), "a response went on past a stop token"
            assert g.finished == (g.token_ids[-1] in stops)
            assert len(g.logprobs) == len(g.token_ids)
        ends = {g.token_ids[-1] for g in generations if g.finished}
        assert special(tokenizer, "<|im_end|>") in ends, "no response ended at the generation config's stop token"
        assert max_logprob_gap(policy, tokenizer, prompts, generations) < 1e-4

        updated, _ = build_policy(ModelConfig(path=str(chat_model)))
        with torch.no_grad():
            for parameter in updated.parameters():
                parameter.add_(torch.randn_like(parameter), alpha=0.05)
        engine.sync(updated.state_dict())
        generations = engine.generate(prompts, 16, 32, 1.0, 1.0, seed=3)
        assert max_logprob_gap(updated, tokenizer, prompts, generations) < 1e-4
        assert max_logprob_gap(policy, tokenizer, prompts, generations) > 0.1, "the sync changed nothing"
    finally:
        engine.close()


# Each preset on each engine, each engine and each preset on 1 and 2 ranks: every pair of the three choices
# in four runs, not eight. A large learning rate, so that after the first update the engine's log-probabilities
# follow the updated policy only if the weight sync worked.
@pytest.mark.parametrize("preset, engine, ranks", [("math", "hf", 1), ("math", "vllm", 2), ("toolcall", "hf", 2),
                                                   ("toolcall", "vllm", 1)])
def test_preset_runs_through_model_path(chat_model, tmp_path, preset, engine, ranks):
    if engine == "vllm":
        pytest.importorskip("vllm")
    out = tmp_path / "run"
    records = run_two_steps(out, "--preset", preset, "--rollout", engine, "--set", f"model.path={chat_model}",
                            "--set", "optim.lr=0.01", ranks=ranks, engine=engine)
    steps = [r for r in records if "train/loss" in r]
    for r in steps:
        assert r["adv/batch_std"] > 0 and r["train/grad_norm"] > 0, "no learning signal: rewards all constant?"
        assert r["rollout/logprob_diff_max"] < 1e-3, "the engine does not sample from the policy being trained"
        for name in ("correct", "format", "length"):
            assert 0.0 <= r[f"density/{name}"] <= 1.0
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [0] * 4 + [2] * 4
    for s in samples:
        assert s["prompt"].startswith("<|im_start|>system\n") and s["prompt"].endswith("<|im_start|>assistant\n")
        assert set(s["rewards"]) == {"correct", "format", "length"}
        assert s["finished"] == s["response"].endswith(("<|im_end|>", "<|endoftext|>"))
