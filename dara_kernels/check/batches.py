"""The two production-shaped batches the check times each backend on (and
benchmarks/targets.py holds its targets on): verl's and the paper's."""
from __future__ import annotations

import torch

# verl's production shape: 256 prompts x 16 responses x 2,048 tokens, K = 3.
VERL_PROMPTS, VERL_GROUP, VERL_TOKENS, VERL_K = 256, 16, 2048, 3
# The paper's tool-calling batch (Table 6): 512 prompts x 4 responses, long responses.
PAPER_PROMPTS, PAPER_GROUP, PAPER_TOKENS = 512, 4, 8192


def token_mask(n: int, t: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Prefix masks (response, then padding) of lengths from T/8 to T."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(t // 8, t + 1, (n,), generator=gen)
    return (torch.arange(t)[None, :] < lengths[:, None]).to(dtype)


def verl_shaped_batch(mask_dtype: torch.dtype = torch.int64):
    """verl's shape: binary rewards from 5% to 90% likely, shuffled uids,
    verl's int64 response mask (or another dtype)."""
    n = VERL_PROMPTS * VERL_GROUP
    gen = torch.Generator().manual_seed(1)
    rewards = (torch.rand(n, VERL_K, generator=gen) < torch.linspace(0.05, 0.9, VERL_K)).float()
    ids = torch.randperm(n, generator=gen) // VERL_GROUP
    return rewards, ids, token_mask(n, VERL_TOKENS, mask_dtype)


def paper_batch():
    """The paper's tool-calling batch: 512 x 4 responses, correctness ~30%,
    format ~1%, length ~50%, shuffled uids, a float32 mask of 8,192 tokens."""
    n = PAPER_PROMPTS * PAPER_GROUP
    gen = torch.Generator().manual_seed(2)
    rewards = (torch.rand(n, 3, generator=gen) < torch.tensor([0.3, 0.01, 0.5])).float()
    ids = torch.randperm(n, generator=gen) // PAPER_GROUP
    return rewards, ids, token_mask(n, PAPER_TOKENS, torch.float32)
