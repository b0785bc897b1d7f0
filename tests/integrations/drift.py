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


def components() -> np.ndarray:
    """[24, 3] float32, groups in GROUPS' order."""
    return np.array([row for rows in GROUPS.values() for row in rows], dtype=np.float32)


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
