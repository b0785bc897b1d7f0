"""Log-probabilities under the sampling temperature (so the first PPO epoch
has ratio 1 against the policy that generated the tokens), the entropy bonus,
and the run seed reaching the model init."""
import pytest
import torch

pytest.importorskip("transformers")

from dara_train.config import ModelConfig  # noqa: E402
from dara_train.model import build_policy  # noqa: E402
from dara_train.ppo import TrainBatch, ppo_loss, token_logprobs  # noqa: E402


def sample(model, prompt, temperature):
    """Tokens sampled by Hugging Face generate and the log-probabilities it sampled them with."""
    torch.manual_seed(0)
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                         temperature=temperature, top_p=1.0, top_k=None, max_new_tokens=6,
                         return_dict_in_generate=True, output_scores=True, pad_token_id=0)
    scores = torch.stack(out.scores, 1)  # [N, T, V]: logits after the temperature warper
    new = out.sequences[:, prompt.shape[1]:]
    behaviour = torch.log_softmax(scores.float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    after_eos = (new == model.config.eos_token_id).long().cumsum(1) - (new == model.config.eos_token_id).long()
    return out.sequences, behaviour, after_eos == 0


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = build_policy(ModelConfig(), run_seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(30)  # sharpen the random model so temperature matters
    return model.eval(), tokenizer


def test_logprobs_match_sampling_temperature(policy):
    model, tokenizer = policy
    prompt = torch.tensor([tokenizer.encode("37=")] * 8)
    ids, behaviour, sampled = sample(model, prompt, 0.7)
    response = slice(prompt.shape[1], None)
    with torch.no_grad():
        at_temperature = token_logprobs(model, ids, torch.ones_like(ids), temperature=0.7)[:, response]
        at_one = token_logprobs(model, ids, torch.ones_like(ids), temperature=1.0)[:, response]
    ratio = torch.exp(at_temperature - behaviour)[sampled]
    assert sampled.sum() > 8
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-4, rtol=0)
    # The old computation (temperature 1) is off-policy for these tokens.
    assert (torch.exp(at_one - behaviour)[sampled] - 1).abs().max() > 0.05


def test_entropy_bonus_lowers_the_loss_by_coef_times_entropy(policy):
    model, tokenizer = policy
    ids = torch.tensor([tokenizer.encode("37=3#")] * 2)
    mask = torch.zeros_like(ids)
    mask[:, 4:] = 1
    with torch.no_grad():
        logp, entropy = token_logprobs(model, ids, torch.ones_like(ids), 0.7, with_entropy=True)
    batch = TrainBatch(ids, torch.ones_like(ids), mask, torch.ones(ids.shape), logp, None)
    rows = torch.arange(2)
    base, stats = ppo_loss(logp, batch, rows, 0.2, 0.0, "token-mean", float(mask.sum()), entropy, 0.0)
    bonus, _ = ppo_loss(logp, batch, rows, 0.2, 0.0, "token-mean", float(mask.sum()), entropy, 0.1)
    mean_entropy = (entropy * mask).sum() / mask.sum()
    assert stats["entropy"] == pytest.approx(mean_entropy.item())
    assert mean_entropy > 0
    assert (base - bonus).item() == pytest.approx(0.1 * mean_entropy.item(), rel=1e-5)


def test_run_seed_seeds_the_model_unless_model_seed_is_set():
    def weights(cfg, seed):
        return build_policy(cfg, run_seed=seed)[0].lm_head.weight

    assert torch.equal(weights(ModelConfig(), 1), weights(ModelConfig(), 1))
    assert not torch.equal(weights(ModelConfig(), 1), weights(ModelConfig(), 2))
    assert torch.equal(weights(ModelConfig(seed=5), 1), weights(ModelConfig(seed=5), 2))
