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


def clip_case():
    """Four tokens with ratios 1.25, 1.25, 0.75, 0.75 and advantages +1, -1, +1, -1."""
    ratio = torch.tensor([[1.25, 1.25, 0.75, 0.75]])
    old = torch.zeros(1, 4)
    batch = TrainBatch(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4), torch.ones(1, 4),
                       torch.tensor([[1.0, -1.0, 1.0, -1.0]]), old, None)
    return ratio.log().requires_grad_(), batch


def test_asymmetric_clip_bounds_the_ratio_at_one_minus_low_and_one_plus_high():
    logp, batch = clip_case()
    rows = torch.arange(1)
    # Symmetric 0.2: the ratio 1.25 with A > 0 is clipped to 1.2, 0.75 with A < 0 to 0.8.
    sym, sym_stats = ppo_loss(logp, batch, rows, 0.2, 0.0, "token-mean", 4.0)
    assert sym.item() == pytest.approx(-(1.2 - 1.25 + 0.75 - 0.8) / 4)
    assert sym_stats["clip_fraction"] == 1.0
    # clip_high=None is the symmetric clip, bit for bit; clip_high=0.2 too.
    for same in (None, 0.2):
        loss, stats = ppo_loss(logp, batch, rows, 0.2, 0.0, "token-mean", 4.0, clip_high=same)
        assert torch.equal(loss, sym) and stats == sym_stats
    # Clip-higher 0.28: 1.25 passes above (its gradient flows), the low side still clips 0.75 at 0.8.
    loss, stats = ppo_loss(logp, batch, rows, 0.2, 0.0, "token-mean", 4.0, clip_high=0.28)
    assert loss.item() == pytest.approx(-(1.25 - 1.25 + 0.75 - 0.8) / 4)
    assert stats["clip_fraction"] == 0.5
    (grad,) = torch.autograd.grad(loss, logp)
    assert grad[0, 0].item() == pytest.approx(-1.25 / 4) and grad[0, 3].item() == 0.0
    # A lower bound of 0.3 lets 0.75 through below.
    loss, _ = ppo_loss(logp, batch, rows, 0.3, 0.0, "token-mean", 4.0, clip_high=0.28)
    assert loss.item() == pytest.approx(-(1.25 - 1.25 + 0.75 - 0.75) / 4)


def test_clip_range_defaults_to_clip_ratio_and_reaches_the_update(monkeypatch):
    import dara_train.train as train
    from dara_train.config import OptimConfig

    assert train.clip_range(OptimConfig()) == (0.2, 0.2)
    assert train.clip_range(OptimConfig(clip_ratio=0.1)) == (0.1, 0.1)
    assert train.clip_range(OptimConfig(clip_high=0.28)) == (0.2, 0.28)
    assert train.clip_range(OptimConfig(clip_low=0.15)) == (0.15, 0.2)
    for bad in (OptimConfig(clip_low=1.0), OptimConfig(clip_high=-0.1)):
        with pytest.raises(ValueError, match="clip range"):
            train.clip_range(bad)
    seen = []

    def spy(*args, **kw):
        seen.append((args[3], args[9] if len(args) > 9 else kw.get("clip_high")))
        return ppo_loss(*args, **kw)

    monkeypatch.setattr(train, "ppo_loss", spy)
    monkeypatch.setattr(train.dist, "get_world_size", lambda: 1)
    monkeypatch.setattr(train, "all_sum", lambda t: t)
    model, tokenizer = build_policy(ModelConfig(), run_seed=0)
    ids = torch.tensor([tokenizer.encode("37=3#")] * 2)
    mask = torch.zeros_like(ids)
    mask[:, 4:] = 1
    with torch.no_grad():
        old = token_logprobs(model, ids, torch.ones_like(ids))
    batch = TrainBatch(ids, torch.ones_like(ids), mask, torch.ones(ids.shape) * mask, old, None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train.update(model, optimizer, batch, OptimConfig(clip_low=0.1, clip_high=0.28))
    train.update(model, optimizer, batch, OptimConfig())
    assert seen == [(0.1, 0.28), (0.2, 0.2)]
