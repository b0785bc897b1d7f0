"""The check's calls taken from the tables (wire.METHODS, wire.OPTIONS
and each option kind's samples in wire.OPTION_KINDS, wire.PRESETS,
wire.METHOD_TRAITS), so that a new method, option value or
preset is checked without editing this file: every method at every K up to
the widest backend's limit, every option's values, every preset, every
reward dtype and every mask dtype."""
from __future__ import annotations

from typing import Any, Iterator

import torch

from ..option_checks import SAMPLE_COLUMNS
from ..wire import (
    METHOD_ONLY_OPTIONS,
    METHOD_PREDICATES,
    METHOD_TRAITS,
    METHODS,
    OPTION_KINDS,
    OPTIONS,
    PRESETS,
    Option,
)
from .cases import make_case
from .sweeps import Call

REWARD_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
MASK_DTYPES = (torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
               torch.float64)
# option_calls' K: the sample names and gates of wire.OPTION_KINDS are for this many columns.
OPTION_K = SAMPLE_COLUMNS
# Fixed layouts cycled over the K range: one group of 97, groups of one, groups of 13 and of 8.
FIXED_SHAPES = ((97, 97), (97, 1), (104, 13), (64, 8))


def option_values(option: Option, default: Any) -> tuple:
    """The values of an option the check runs: its kind's samples
    (wire.OPTION_KINDS), e.g. every choice, the other flag, a real value
    far from the default, a name for each of OPTION_K columns."""
    return OPTION_KINDS[option.kind].samples(option, default)


def _method_options(method: str) -> Iterator[tuple[Option, Any]]:
    """(option, value) for every option `method` takes, each value the check runs."""
    for option in OPTIONS:
        if option.name in METHOD_ONLY_OPTIONS:
            if method not in METHOD_ONLY_OPTIONS[option.name]:
                continue
            default = METHOD_TRAITS[method].options[option.name]
        else:
            default = option.default
        for value in option_values(option, default):
            yield option, value


def _choice_variants(method: str) -> list[dict]:
    """One option set per value of each method-only choice (calibration for dara and static)."""
    variants = [{option.name: value} for option, value in _method_options(method)
                if option.name in METHOD_TRAITS[method].options and option.kind == "choice"]
    return variants or [{}]


def _token_inputs(case, k: int) -> dict:
    """A third of the calls carry a mask, a third lengths with token normalisation, a third neither."""
    if k % 3 == 0:
        return {"response_mask": case.mask}
    if k % 3 == 1:
        return {"response_lengths": case.lengths, "batch_norm": "token"}
    return {}


def k_range_calls(max_k: int, edges: tuple[int, ...]) -> Iterator[Call]:
    """One call at each K from 1 to max_k (methods, layouts and token
    inputs rotating; NaN entries, unscorable rows, uneven shuffled groups
    with singletons), then every method with each of its choices at each K
    in `edges` (1 and each backend's column limit), in both layouts."""
    for k in range(1, max_k + 1):
        method = METHODS[k % len(METHODS)]
        layout = "shuffled" if k % 2 else "fixed"
        case = make_case(k, layout, k, nan_fraction=0.15, shape=(97,) if k % 2 else FIXED_SHAPES[k // 2 % 4])
        options = {"method": method}
        if k % 4 == 1:
            options["reward_weights"] = torch.linspace(0.5, 2.0, k).tolist()
        yield Call(f"K={k} {case.label}", case.rewards, {**case.layout, **_token_inputs(case, k)}, options)
    for k in edges:
        for method in METHODS:
            for variant in _choice_variants(method):
                for layout, shape in (("fixed", (104, 13)), ("shuffled", (97,))):
                    case = make_case(7 + k, layout, k, nan_fraction=0.1, shape=shape)
                    yield Call(f"K={k} {case.label}", case.rewards, case.kwargs(with_mask=layout == "shuffled"),
                               {"method": method, **variant})


def option_calls() -> Iterator[Call]:
    """Every method with each value of every option it takes (wire.OPTIONS),
    under every preset, with reward weights, and with reward bounds where
    its weights read the batch's extremes; K = 4, shuffled uneven groups, a
    bool mask (so that token normalisation has its weights)."""
    case = make_case(11, "shuffled", OPTION_K, shape=(97,))
    inputs = case.kwargs(with_mask=True)
    for method in METHODS:
        extras = [{option.name: value} for option, value in _method_options(method)]
        extras += [{"preset": preset} for preset in PRESETS]
        extras.append({"reward_weights": [0.5, 2.0, 1.0, 0.25]})
        if method in METHOD_PREDICATES["raw_extremes"]:
            extras.append({"reward_bounds": [(-4.0, 4.0)] * 4})
        for extra in extras:
            yield Call(f"options {case.label}", case.rewards, inputs, {"method": method, **extra})


def dtype_calls() -> Iterator[Call]:
    """Every method on rewards of each dtype, and with a mask of each dtype
    (and with lengths) under verl's token whitening."""
    for seed, method in enumerate(METHODS):
        for dtype in REWARD_DTYPES:
            case = make_case(200 + seed, "shuffled", 3, dtype=dtype, shape=(97,))
            yield Call(f"rewards {case.label}", case.rewards, case.layout, {"method": method})
        case = make_case(300 + seed, "shuffled", 3, shape=(97,))
        for mask_dtype in MASK_DTYPES:
            yield Call(f"mask {mask_dtype} {case.label}", case.rewards,
                       {**case.layout, "response_mask": case.mask.to(mask_dtype)}, {"method": method, "preset": "verl"})
        yield Call(f"lengths {case.label}", case.rewards, case.kwargs(with_lengths=True),
                   {"method": method, "preset": "verl"})
