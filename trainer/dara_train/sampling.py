"""Dynamic sampling (DAPO's, with the DARA authors' round sizing): draw candidate prompt groups, keep the
groups that carry signal under the chosen criterion, as `fused_advantage` flags them, and draw again until
`rollout.prompts_per_step` groups are accepted or `rollout.max_rounds` rounds are spent
(docs/trainer.md, Dynamic sampling)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from dara_kernels.group_signal import CRITERIA as SIGNAL_CRITERIA

# The criteria besides "off" (every group is trained on): the fused_advantage per-row flag that accepts a row's
# group, one table with the integrations' filters.
CRITERIA = ("off", *SIGNAL_CRITERIA)
# Later rounds ask for the deficit over the observed acceptance rate plus this margin (the DARA authors' 25%).
ROUND_MARGIN = 1.25


def check_sampling(rollout, world: int) -> str:
    """The criterion's name, after checking the sampling settings against the number of ranks."""
    # YAML 1.1 reads a bare `off` as false.
    criterion = "off" if rollout.dynamic_sampling is False else rollout.dynamic_sampling
    if criterion not in CRITERIA:
        raise ValueError(f"rollout.dynamic_sampling={rollout.dynamic_sampling!r} is not one of "
                         f"{', '.join(CRITERIA)}")
    if rollout.prompts_per_step % world:
        raise ValueError(f"rollout.prompts_per_step={rollout.prompts_per_step} must be divisible by the "
                         f"{world} ranks")
    if criterion != "off":
        first = first_round_groups(rollout)
        if first < 1 or first % world:
            raise ValueError(f"rollout.candidate_groups={first} must be a positive multiple of the {world} ranks")
        if rollout.max_rounds < 1:
            raise ValueError(f"rollout.max_rounds={rollout.max_rounds} must be at least 1")
    return criterion


def first_round_groups(rollout) -> int:
    """Candidate groups of a step's first round (rollout.candidate_groups; 0: rollout.prompts_per_step)."""
    return rollout.candidate_groups or rollout.prompts_per_step


def next_round_groups(deficit: int, accepted: int, candidates: int, cap: int, world: int) -> int:
    """Candidate groups of a later round: the deficit over the acceptance rate observed so far in the step,
    plus ROUND_MARGIN, rounded up to a multiple of the ranks, at least one group per rank and at most `cap`
    (the first round's size, which is also asked for while nothing has been accepted)."""
    if accepted == 0:
        return cap
    wanted = math.ceil(deficit * candidates / accepted * ROUND_MARGIN)
    return min(cap, max(world, math.ceil(wanted / world) * world))


def round_rng(base_seed: int, round_index: int) -> random.Random:
    """Round 0 draws from the step's own seed (the prompts of a run without dynamic sampling); a later round
    from a seed of its own."""
    return random.Random(base_seed if round_index == 0 else f"{base_seed}:{round_index}")


@dataclass
class Group:
    """One prompt and its G responses, as sampled and scored on the rank that generated them."""
    prompt: object
    prompt_ids: list[int]
    generations: list           # rollout.Generation, G of them
    rewards: object             # [G, K] tensor


@dataclass
class Sampled:
    """A step's rollout: the groups this rank trains on, every candidate's rewards (this rank's) and the
    sampling counts of all ranks."""
    groups: list[Group]
    candidate_rewards: object   # [rows, K] tensor over every round
    signal: object              # the first round's fused_advantage output (densities when nothing is trained)
    stats: dict = field(default_factory=dict)
