"""One batch that every drop-in's suite puts through its framework, so that the four cannot drift apart: each
must give the op's advantages for the same non-default options, and each filter must keep exactly the groups
that our criterion and the framework's documented rule for a group of one (live) row say.

Six groups of four responses, three rewards (weights 1, 0.5, 2):

- `varies`: the weighted sum varies;
- `conflict`: accuracy and format vary while 1 * accuracy + 0.5 * format is constant;
- `uniform`: nothing varies;
- `below-tol`: length varies by about 1e-3, active under the op's default `active_tol` (1e-6), not under
  OPTIONS' 0.01;
- `nan`: one response's format is NaN (not scored): constant under the default `nan_policy="ignore"`, varying
  under OPTIONS' `"zero"`;
- `one-live`: varies, but a framework that masks responses (SkyRL's loss masks) sees one live row.
"""
import numpy as np
import torch

KEYS = ["accuracy", "format", "length"]
WEIGHTS = [1.0, 0.5, 2.0]
G = 4
OPTIONS = {"active_tol": 0.01, "nan_policy": "zero"}
NAN = float("nan")
GROUPS = {
    "varies": [[1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]],
    "conflict": [[1, 0, 0], [0, 2, 0], [1, 0, 0], [0, 2, 0]],
    "uniform": [[1, 1, 0.5]] * 4,
    "below-tol": [[1, 1, 0.5], [1, 1, 0.501], [1, 1, 0.5], [1, 1, 0.501]],
    "nan": [[1, 1, 0], [1, NAN, 0], [1, 1, 0], [1, 1, 0]],
    "one-live": [[1, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]],
}
# The groups with signal under OPTIONS, per criterion, deciding on all four rows of each group.
SIGNAL = {"any": {"varies", "conflict", "nan", "one-live"}, "sum": {"varies", "nan", "one-live"}}
# The same under the op's defaults: a filter that ignored OPTIONS would keep these.
DEFAULT_SIGNAL = {"any": {"varies", "conflict", "below-tol", "one-live"},
                  "sum": {"varies", "below-tol", "nan", "one-live"}}


def components(missing: float = NAN) -> np.ndarray:
    """[24, 3] float32, groups in GROUPS' order; `missing` in place of the entry no function scored (0 for a
    framework whose rewards are never missing)."""
    rows = np.array([row for rows in GROUPS.values() for row in rows], dtype=np.float32)
    return np.where(np.isnan(rows), np.float32(missing), rows)


def uids() -> list:
    return [name for name in GROUPS for _ in range(G)]


def live() -> np.ndarray:
    """[24] bool: the rows a framework that masks responses trains on (one-live keeps its first)."""
    names = uids()
    return np.array([name != "one-live" or names.index(name) == i for i, name in enumerate(names)])


def kept(criterion: str, keeps_singletons: bool, masked: bool) -> set:
    """The groups a filter keeps: SIGNAL[criterion], where `masked` one-live is decided on its one live row,
    kept only by a framework that keeps a group of one."""
    groups = set(SIGNAL[criterion])
    if masked:
        groups.discard("one-live")
        if keeps_singletons:
            groups.add("one-live")
    return groups


def expected(method: str = "dara", response_mask=None, **options):
    """The op's output on the batch with OPTIONS and `options`, groups by uid."""
    import dara_kernels as dk

    index = torch.tensor([list(GROUPS).index(name) for name in uids()])
    return dk.fused_advantage(torch.from_numpy(components()), group_index=index, method=method,
                              reward_weights=WEIGHTS, response_mask=response_mask, **OPTIONS, **options)


# Every framework setting that changes the advantages, at the values each drop-in honours or refuses, for the
# op's grpo (the framework's GRPO on the weighted summed reward) and gdpo (its per-reward GDPO). Each framework's
# suite puts every row through its framework on COMPONENTS, the row's settings on top of OWN[framework][method]
# (the settings under which the framework itself runs that method):
# - HONOURED: the drop-in's advantages equal the framework's own estimator's under the same settings, to float32
#   rounding (a drop-in that dropped its mapping of the setting gives other advantages and fails here);
# - REPLACED: the drop-in's method wins over the framework's setting for its aggregation (docs/spec.md,
#   Integrations): equal to the framework's own estimator of that method, OWN on top of the row;
# - REFUSED: configuring the run stops with an error that names the row's first setting (a drop-in that
#   ignored the value would run).
HONOURED, REPLACED, REFUSED = "honoured", "replaced", "refused"
BOTH = ("grpo", "gdpo")
OWN = {
    "trl": {"grpo": {"multi_objective_aggregation": "sum_then_normalize"},
            "gdpo": {"multi_objective_aggregation": "normalize_then_sum"}},
    "verl": {"grpo": {"adv_estimator": "grpo"}, "gdpo": {"adv_estimator": "gdpo"}},
    "swift": {"grpo": {"scale_rewards": "group"}, "gdpo": {"scale_rewards": "gdpo"}},
    "skyrl": {"grpo": {"advantage_estimator": "grpo"}, "gdpo": {}},  # SkyRL has no GDPO: the op is the reference
}
SETTINGS = {
    "trl": [  # GRPOConfig
        ({"scale_rewards": "group"}, {"grpo": HONOURED, "gdpo": HONOURED}),
        ({"scale_rewards": "none"}, {"grpo": HONOURED, "gdpo": REFUSED}),
        ({"scale_rewards": "batch"}, {"grpo": REFUSED, "gdpo": REFUSED}),
        ({"multi_objective_aggregation": "sum_then_normalize"}, {"grpo": HONOURED, "gdpo": REPLACED}),
        ({"multi_objective_aggregation": "normalize_then_sum"}, {"grpo": REFUSED, "gdpo": HONOURED}),
    ],
    "verl": [  # algorithm.*
        ({"norm_adv_by_std_in_grpo": True}, {"grpo": HONOURED, "gdpo": HONOURED}),
        ({"norm_adv_by_std_in_grpo": False}, {"grpo": HONOURED, "gdpo": HONOURED}),
        ({"use_kl_in_reward": True}, {"grpo": REFUSED, "gdpo": REFUSED}),
    ],
    "swift": [  # the GRPO arguments (the trainer's attributes of the same names)
        ({"scale_rewards": "group"}, {"grpo": HONOURED, "gdpo": REPLACED}),
        ({"scale_rewards": "none"}, {"grpo": HONOURED, "gdpo": REFUSED}),
        ({"scale_rewards": "batch"}, {"grpo": REFUSED, "gdpo": REFUSED}),
        ({"scale_rewards": "gdpo"}, {"grpo": REFUSED, "gdpo": HONOURED}),
        ({"advantage_estimator": "rloo"}, {"grpo": REFUSED, "gdpo": REFUSED}),
        ({"advantage_estimator": "reinforce_plus_plus"}, {"grpo": REFUSED, "gdpo": REFUSED}),
        ({"kl_in_reward": True, "beta": 0.04}, {"grpo": REFUSED, "gdpo": REFUSED}),
    ],
    "skyrl": [  # trainer.algorithm.*
        ({"grpo_norm_by_std": True}, {"grpo": HONOURED, "gdpo": HONOURED}),
        ({"grpo_norm_by_std": False}, {"grpo": HONOURED, "gdpo": HONOURED}),
        ({"use_kl_in_reward": True, "use_kl_loss": False}, {"grpo": REFUSED, "gdpo": REFUSED}),
        ({"zero_variance_filter_tol": 0.0, "zero_variance_filter": True}, {"grpo": REFUSED, "gdpo": REFUSED}),
    ],
}


def setting_cases(framework: str) -> list:
    """pytest parameters (method, settings, status) for SETTINGS[framework], with ids."""
    import pytest

    return [pytest.param(method, settings, status[method],
                         id=f"{method}-{'-'.join(f'{k}={v}' for k, v in settings.items())}-{status[method]}")
            for settings, status in SETTINGS[framework] for method in BOTH]


def framework_settings(framework: str, method: str, settings: dict, status: str) -> tuple:
    """(the drop-in's settings, the framework's own estimator's settings) for a row."""
    own = OWN[framework][method]
    return {**own, **settings}, ({**settings, **own} if status == REPLACED else {**own, **settings})


def refusal(settings: dict) -> str:
    """The regex a refusal must match: the row's first setting, named."""
    import re

    return re.escape(next(iter(settings)))


def assert_same(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    """Equal to float32 rounding: the frameworks compute in float32, the op accumulates in float64 (the drift
    batch's below-tol group divides a 1e-3 spread by its standard deviation, which leaves about 1e-4)."""
    err = (ours.double() - theirs.double()).abs().max().item()
    print(f"{what}: largest difference {err:.2e}")
    assert err < 2e-4 * max(1.0, theirs.abs().max().item()), f"{what}: largest difference {err:.2e}"
