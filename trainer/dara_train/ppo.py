"""PPO clipped surrogate over response tokens, with an optional k3 KL to a
frozen reference policy and an optional entropy bonus. Losses are normalised by the global token (or
sequence) count, so any split of the batch over ranks gives the same update."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class TrainBatch:
    input_ids: torch.Tensor       # [N, S] prompt + response, right padded
    attention_mask: torch.Tensor  # [N, S]
    response_mask: torch.Tensor   # [N, S] 1 on response tokens (predicted positions)
    advantages: torch.Tensor      # [N, S] token advantages aligned with response_mask
    old_logprobs: torch.Tensor    # [N, S]
    ref_logprobs: torch.Tensor | None


def token_logprobs(model, input_ids, attention_mask, temperature: float = 1.0,
                   with_entropy: bool = False):
    """log p(token_t | tokens_<t) at every position t >= 1 (position 0 gets 0),
    under the distribution the rollouts sample from: logits / temperature.
    Any other temperature would make the PPO ratio compare against a policy
    that never generated the tokens. With `with_entropy`, also returns that
    distribution's entropy at every position."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()[:, :-1]
    if temperature > 0:  # 0 is greedy decoding: no distribution to match, keep the raw logits
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    logp = F.pad(log_probs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1), (1, 0))
    if not with_entropy:
        return logp
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return logp, F.pad(entropy, (1, 0))


def ppo_loss(logprobs, batch: TrainBatch, rows: torch.Tensor, clip_ratio: float, kl_coef: float,
             loss_agg: str, normaliser: float, entropy=None, entropy_coef: float = 0.0,
             clip_high: float | None = None) -> tuple[torch.Tensor, dict]:
    """`clip_ratio` clips the ratio at 1 - clip_ratio below and, unless `clip_high` is given, at
    1 + clip_ratio above (with it: 1 + clip_high, DAPO's asymmetric clip)."""
    clip_low, clip_high = clip_ratio, clip_ratio if clip_high is None else clip_high
    mask = batch.response_mask[rows].float()
    adv = batch.advantages[rows]
    ratio = torch.exp(logprobs - batch.old_logprobs[rows])
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv)
    per_token = -surrogate
    if kl_coef and batch.ref_logprobs is not None:
        log_ratio = batch.ref_logprobs[rows] - logprobs
        per_token = per_token + kl_coef * (torch.exp(log_ratio) - log_ratio - 1)
    if entropy_coef and entropy is not None:
        per_token = per_token - entropy_coef * entropy
    if loss_agg == "token-mean":
        loss = (per_token * mask).sum() / normaliser
    elif loss_agg == "seq-mean":
        loss = ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum() / normaliser
    else:
        raise ValueError(f"optim.loss_agg={loss_agg!r} is not token-mean or seq-mean")
    clipped = (((ratio - 1).abs() > clip_low) if clip_low == clip_high
               else (ratio < 1 - clip_low) | (ratio > 1 + clip_high)).float()
    stats = {"clip_fraction": ((clipped * mask).sum() / mask.sum().clamp(min=1)).item()}
    if entropy is not None:
        stats["entropy"] = ((entropy.detach() * mask).sum() / mask.sum().clamp(min=1)).item()
    return loss, stats
