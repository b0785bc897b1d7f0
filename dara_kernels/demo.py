"""`python -m dara_kernels.demo`: every method on one embedded rollout batch,
with the diagnostics that show which reward drives the advantages.

The batch: 512 prompts x 8 responses, three rewards with the shape of a real
run early in training: correctness (depends on prompt difficulty), a sparse
format reward (~4% compliance) and a length-compliance reward (~70%).
"""
from __future__ import annotations

import argparse
import time

import torch

from . import METHODS, fused_advantage
from .backends import choose_backend

REWARD_NAMES = ("correct", "format", "length")


def embedded_batch(prompts: int = 512, group: int = 8, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    difficulty = torch.rand(prompts, 1, generator=gen).expand(prompts, group).reshape(-1)
    correct = (torch.rand(prompts * group, generator=gen) > difficulty).float()
    fmt = (torch.rand(prompts * group, generator=gen) < 0.04).float()
    length = (torch.rand(prompts * group, generator=gen) < 0.7).float()
    return torch.stack([correct, fmt, length], 1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--group", type=int, default=8)
    args = parser.parse_args(argv)
    rewards = embedded_batch(args.prompts, args.group)
    n = rewards.shape[0]
    print(f"batch: {args.prompts} prompts x {args.group} responses, rewards {REWARD_NAMES}")
    print("reward means:", ", ".join(f"{k}={v:.3f}" for k, v in zip(REWARD_NAMES, rewards.mean(0).tolist())))
    header = f"{'method':<11} {'backend':<9} {'density':<20} {'weights':<20} {'energy share':<20} {'us/call':>8}"
    print(header)
    print("-" * len(header))
    for method in METHODS:
        out = fused_advantage(rewards, args.group, method=method, backend=args.backend)
        start = time.perf_counter()
        for _ in range(5):
            fused_advantage(rewards, args.group, method=method, backend=args.backend)
        micros = (time.perf_counter() - start) / 5 * 1e6
        share = out.weighted_energy / out.weighted_energy.sum().clamp(min=1e-30)
        fmt = lambda t: " ".join(f"{v:5.2f}" for v in t.tolist())  # noqa: E731
        used = choose_backend(args.backend, rewards.device, rewards.shape[1]).name
        print(f"{method:<11} {used:<9} {fmt(out.density):<20} {fmt(out.weights):<20} {fmt(share):<20} {micros:8.0f}")
    print(f"\nN={n}. 'energy share' is each reward's part of sum_k (w_k A_k)^2: under GDPO the sparse "
          "format reward gets a share proportional to its density; DARA moves the shares towards equal.")


if __name__ == "__main__":
    main()
