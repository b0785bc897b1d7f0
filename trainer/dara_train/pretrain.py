"""Supervised pre-training on a task's own demonstrations, before RL: the
starting policy a preset asks for (`pretrain.steps` > 0), as the paper's runs
start from instruct models. Deterministic: the demonstrations come from
`pretrain.seed`, the order is fixed, and nothing is sampled, so every run of a
preset (whatever its RL seed) starts from the same policy when `model.seed`
is fixed."""
from __future__ import annotations

import random

import torch


def pretrain(model, tokenizer, task, cfg) -> dict:
    """`cfg.steps` AdamW steps of next-token cross-entropy on the reply tokens (and the stop token) of
    `cfg.batch_size` demonstrations each; returns the last step's loss."""
    rng = random.Random(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    mode = model.training
    model.train()
    loss = torch.zeros(())
    for _ in range(cfg.steps):
        ids, labels, attention = demonstration_batch(tokenizer, task.demonstrations(rng, cfg.batch_size))
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                                 ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.train(mode)
    return {"pretrain/loss": loss.item(), "pretrain/steps": cfg.steps}


def demonstration_batch(tokenizer, demonstrations) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt + reply + stop token rows; the labels are the reply and stop tokens (-100 elsewhere)."""
    rows, starts = [], []
    for prompt, reply in demonstrations:
        prompt_ids = tokenizer.encode_prompt(prompt.messages)
        rows.append(prompt_ids + tokenizer.encode_reply(reply) + [tokenizer.eos_token_id])
        starts.append(len(prompt_ids))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    attention = torch.zeros_like(ids)
    for i, (row, start) in enumerate(zip(rows, starts)):
        ids[i, :len(row)] = torch.tensor(row)
        labels[i, start:len(row)] = ids[i, start:len(row)]
        attention[i, :len(row)] = 1
    return ids, labels, attention
