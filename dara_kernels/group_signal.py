"""A batch's groups and which of them carry signal, without any framework: uid keys to group ids
(`group_ids`), each group's flag read from the fused op's output by a criterion (`CRITERIA`, `signal_of`,
`GroupSignal`), and the DARA authors' sampling metrics (`Sampling`, `SAMPLING_METRICS`). dara-train's dynamic
sampling and the integrations' filters share them; the integrations' `decide` (integrations/groups.py) makes
the op call with a run's settings.

The flags are the op's own (docs/spec.md#group-signal): criterion `any` keeps a group where the op's
`informative` holds (some reward is active: two valid scores or more and a standard deviation above
`active_tol`, NaN entries handled by `nan_policy`), `sum` one where its `sum_informative` holds (the weighted
summed reward varies). A group whose rewards vary while their weighted sum is constant (accuracy up, length
down) teaches every reward, and `sum` drops it. A group of one row has neither flag: each framework's
documented rule says whether it is kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .output import AdvantageOutput

# criterion -> the op's per-row flag that keeps a row's group.
CRITERIA = {"any": "informative", "sum": "sum_informative"}
# The authors' names (their filter_groups metrics), logged by every path that filters groups.
SAMPLING_METRICS = ("rounds", "acceptance_rate", "generation_overhead", "informative_groups_discarded",
                    "reverse_conflict_rate")


def group_ids(index) -> torch.Tensor:
    """uid strings (or any hashables) to int64 group ids, numbered in order of first appearance. One dict
    lookup per row: sorting the strings, as np.unique does, costs about ten times as much for a verl batch."""
    values = np.asarray(index)
    if values.dtype.kind in "iu":
        return torch.from_numpy(values.astype(np.int64))
    numbers: dict = {}
    return torch.from_numpy(np.fromiter((numbers.setdefault(u, len(numbers)) for u in values.tolist()),
                                        dtype=np.int64, count=len(values)))


def check_criterion(criterion: str, where: str) -> str:
    if criterion not in CRITERIA:
        raise ValueError(f"{where}={criterion!r} is not one of {', '.join(CRITERIA)}")
    return criterion


@dataclass
class GroupSignal:
    """Per group g (numbered 0..G-1 in order of first appearance; `group_of_row` maps rows to them)."""
    group_of_row: torch.Tensor  # [N] int64
    rows: torch.Tensor  # [G] int64
    signal: torch.Tensor  # [G] bool: the criterion's flag
    output: AdvantageOutput  # the call the flags come from (its batch counts)
    criterion: str

    def keep(self, keep_singletons: bool) -> torch.Tensor:
        """[G] bool: groups with signal and, if the framework keeps them, groups of one row (no spread to
        measure)."""
        return self.signal | ((self.rows < 2) & keep_singletons)

    def keep_rows(self, keep_singletons: bool) -> torch.Tensor:
        """[N] bool: the rows of the groups `keep` keeps."""
        return self.keep(keep_singletons)[self.group_of_row]

    def first_rows(self) -> torch.Tensor:
        """[N] bool: the first row of each group."""
        first = torch.zeros(self.group_of_row.numel(), dtype=torch.bool)
        first[np.unique(self.group_of_row.numpy(), return_index=True)[1]] = True
        return first


def signal_of(out: AdvantageOutput, groups: torch.Tensor, criterion: str) -> GroupSignal:
    """The criterion's per-group flag from an op output over rows grouped by `groups` [N] (ids 0..G-1)."""
    groups = groups.cpu()
    num_groups = int(groups.max()) + 1 if groups.numel() else 0
    rows = torch.zeros(num_groups, dtype=torch.int64).index_add(0, groups, torch.ones_like(groups))
    flags = getattr(out, CRITERIA[criterion]).cpu().double()
    signal = torch.zeros(num_groups, dtype=torch.float64).index_add(0, groups, flags) > 0
    return GroupSignal(groups, rows, signal, out, criterion)


@dataclass
class Sampling:
    """One step's filtering, summed over its rounds (a round: one decision on newly generated groups)."""
    criterion: str
    rounds: int = 0
    candidate_groups: int = 0
    accepted_groups: int = 0
    informative_groups_discarded: int = 0
    conflict_groups: int = 0
    responses: int = 0

    def add(self, out: AdvantageOutput, candidate_groups: int, accepted_groups: int, responses: int) -> None:
        """A round: `out` is the call its flags came from (batch counts over all ranks in distributed mode),
        `responses` the responses generated for it."""
        conflicts = int(out.conflict_groups)  # an active reward, a constant summed reward
        self.rounds += 1
        self.candidate_groups += candidate_groups
        self.accepted_groups += accepted_groups
        self.conflict_groups += conflicts
        # `sum` drops exactly the conflict groups among those with an active reward; `any` drops none of them.
        self.informative_groups_discarded += conflicts if self.criterion == "sum" else 0
        self.responses += responses

    def add_signal(self, signal: GroupSignal, keep: torch.Tensor) -> None:
        """A round decided by `signal`, keeping the groups `keep` [G] marks."""
        self.add(signal.output, int(keep.numel()), int(keep.sum()), int(signal.group_of_row.numel()))

    def metrics(self, trained_responses: int, prefix: str = "dara/sampling/") -> dict:
        """SAMPLING_METRICS: rounds, accepted / candidate groups, responses generated per response trained on
        (inf when none is trained), groups with an active reward the filter dropped, and the share of candidate
        groups whose rewards vary while their weighted sum is constant."""
        values = {"rounds": self.rounds,
                  "acceptance_rate": self.accepted_groups / self.candidate_groups,
                  "generation_overhead": self.responses / trained_responses if trained_responses else math.inf,
                  "informative_groups_discarded": self.informative_groups_discarded,
                  "reverse_conflict_rate": self.conflict_groups / self.candidate_groups}
        return {prefix + name: values[name] for name in SAMPLING_METRICS}
