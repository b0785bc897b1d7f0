"""The one definition of every table the Python, C++ and Triton code share:
each method's traits, every option (its kind, check, default and kernel
encoding), the packed option vector, the accumulator wire format (what ranks
all-reduce, docs/spec.md#distributed-mode), the per-group table accumulate
leaves for apply and the output fields; besides the tables, the few pure
functions that read sizes and codes off them (combined_columns,
vector_columns, segment_offsets, accumulator_sizes, ...); and the schemas of
the compiled ops. A backend's column limit is in its record
(dara_kernels/backends.py).

`csrc/core/generated_tables.h` and `dara_kernels/triton/generated_tables.py`
are generated from these tables by `python scripts/generate_wire.py`;
`tests/test_wire.py` fails when either is stale, so no copy can drift. The
reference backend alone reads the options itself: it is the independent oracle
these tables are tested against.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from . import option_checks

BATCH_NORMS = ("none", "response", "token")
BATCH_NORM_CODE = {name: code for code, name in enumerate(BATCH_NORMS)}

# The combined columns a_jc that s_j is a linear form in (docs/spec.md#aggregation),
# each mode's count as (per reward, constant): C = per_reward * K + constant.
COLUMN_MODES: Mapping[str, tuple[int, int]] = {
    "summed": (0, 1),          # GRPO: the group-normalised sum_k b_k r_jk
    "soft_minimum": (0, 1),    # RVPO: -(1/k) ln((1/K) sum_k exp(-k b_k A_jk))
    "group_weighted": (1, 0),  # DVAO: w_gk A_jk
    "positive_parts": (1, 1),  # calibration="positive": sum_k A_jk, then each [A_jk]_+
    "per_reward": (1, 0),      # each A_jk
}


@dataclass(frozen=True)
class MethodTraits:
    columns: str                  # a COLUMN_MODES key; "per_reward" becomes "positive_parts" under positive calibration
    batch_norm: str = "response"  # default batch normalisation (paper Table 5: GRPO and DVAO have none)
    raw_extremes: bool = False    # weights from the batch's raw moments and extremes (SAW, SA-MRPO)
    drops_conflicts: bool = False  # rows whose A_jk disagree in sign are dropped (GD2PO-Hard)
    options: Mapping[str, Any] = field(default_factory=dict)  # method-only options and their defaults


# In code order: a method's code is its position.
METHOD_TRAITS: Mapping[str, MethodTraits] = {
    "grpo": MethodTraits("summed", batch_norm="none"),
    "gdpo": MethodTraits("per_reward"),
    "static": MethodTraits("per_reward", options={"calibration": "symmetric"}),
    # The authors' main method, DARA-Asym: only positive advantages are
    # amplified, by at most 5x the densest reward's weight.
    "dara": MethodTraits("per_reward", options={"calibration": "positive", "max_weight": 5.0}),
    "dvao": MethodTraits("group_weighted", batch_norm="none"),
    "saw": MethodTraits("per_reward", raw_extremes=True),
    "sa_mrpo": MethodTraits("per_reward", raw_extremes=True),
    "gd2po_hard": MethodTraits("per_reward", drops_conflicts=True),
    "rvpo": MethodTraits("soft_minimum", options={"rvpo_k": 1.0}),
}
METHODS = tuple(METHOD_TRAITS)
METHOD_CODE = {name: code for code, name in enumerate(METHODS)}


def column_mode(method: str, positive: bool) -> str:
    mode = METHOD_TRAITS[method].columns
    return "positive_parts" if positive and mode == "per_reward" else mode


def combined_columns(method: str, k: int, positive: bool = False) -> int:
    """C for K rewards (COLUMN_MODES)."""
    per_reward, constant = COLUMN_MODES[column_mode(method, positive)]
    return per_reward * k + constant


# Method predicates the kernels branch on: name -> the methods for which it holds.
METHOD_PREDICATES: Mapping[str, tuple[str, ...]] = {
    "summed_reward": tuple(m for m, t in METHOD_TRAITS.items() if t.columns == "summed"),
    "soft_minimum": tuple(m for m, t in METHOD_TRAITS.items() if t.columns == "soft_minimum"),
    # One combined column: weights b_k, combine = (1), diagnostics as for GDPO.
    "one_column": tuple(m for m, t in METHOD_TRAITS.items() if COLUMN_MODES[t.columns] == (0, 1)),
    "group_weighted": tuple(m for m, t in METHOD_TRAITS.items() if t.columns == "group_weighted"),
    "drops_conflicts": tuple(m for m, t in METHOD_TRAITS.items() if t.drops_conflicts),
    "raw_extremes": tuple(m for m, t in METHOD_TRAITS.items() if t.raw_extremes),
}

PRESETS = ("default", "trl", "verl")
NAN_POLICIES = ("ignore", "zero", "raise")
SINGLETON_RULES = ("zero", "verl")
CALIBRATIONS = ("positive", "symmetric")
NO_SIGNAL_RULES = ("keep", "zero")


@dataclass(frozen=True)
class OptionKind:
    """What every option of one kind shares: code that would switch on an
    option's kind reads its row instead."""
    field_type: str      # AdvantageOptions' field annotation (generated_options.py)
    keyword_type: str    # fused_advantage's keyword annotation (api.py's generated block)
    check: Callable[[Any, Any], Any]    # (option, given value) -> the resolved value, or an error naming it
    samples: Callable[[Any, Any], tuple]  # (option, its default) -> the values the check's sweep runs
    cache_key: Callable[[Any], Any] = option_checks.same  # a given value in hashable form (api._options)
    # How its values relate to the K reward columns: "" not at all; "named": one value per column
    # (validation checks there are K); "indexed": column indices, checked below K by validation and by both
    # C++ bindings (csrc/input_checks.h, through the generated kColumnEntry and is_reward_column), and
    # packed after the option vector's scalar fields, `entry` indices per entry.
    columns: str = ""
    entry: int = 0
    # (checked value, the "named" option's value) -> the value resolved against the reward names.
    resolve: Optional[Callable[[Any, Any], Any]] = None


OPTION_KINDS: Mapping[str, OptionKind] = {
    "real": OptionKind("Optional[float]", "Optional[float]", option_checks.check_real,
                       option_checks.sample_real),   # finite >= 0 (at most Option.upper)
    "positive": OptionKind("Optional[float]", "Optional[float]", option_checks.check_positive,
                           option_checks.sample_positive),  # finite > 0
    "cap": OptionKind("Optional[float]", "Optional[float]", option_checks.check_cap,
                      option_checks.sample_cap),     # > 0, math.inf for none
    "flag": OptionKind("Optional[bool]", "Optional[bool]", option_checks.check_flag, option_checks.sample_flag),
    "choice": OptionKind("Optional[str]", "Optional[str]", option_checks.check_choice,
                         option_checks.sample_choice),  # one of Option.choices
    "names": OptionKind("Optional[tuple[str, ...]]", "Optional[Sequence[str]]", option_checks.check_names,
                        option_checks.sample_names, option_checks.frozen, columns="named"),
    "gates": OptionKind("Optional[tuple[tuple[int, int], ...]]",
                        "Optional[Mapping[Union[str, int], Union[str, int]]]", option_checks.check_gates,
                        option_checks.sample_gates, option_checks.frozen, columns="indexed", entry=2,
                        resolve=option_checks.resolve_gates),
}


@dataclass(frozen=True)
class Option:
    """A keyword of fused_advantage, of a kind in OPTION_KINDS. A
    method-only option (default None) takes its default from METHOD_TRAITS
    and is None for the other methods."""
    name: str
    kind: str
    default: Any = None
    choices: tuple[str, ...] = ()
    upper: Optional[float] = None  # "real" options with an upper bound


# In fused_advantage's keyword order.
OPTIONS: tuple[Option, ...] = (
    Option("eps", "real", 1e-6),
    Option("unbiased", "flag", True),
    Option("scale_by_std", "flag", True),
    Option("batch_norm", "choice", None, BATCH_NORMS),  # the method's MethodTraits.batch_norm
    Option("bn_eps", "real", 1e-6),
    Option("nan_policy", "choice", "ignore", NAN_POLICIES),
    Option("active_tol", "real", 1e-6),
    Option("alpha", "real", 0.5),
    Option("density_floor", "real", 0.0, upper=1.0),
    Option("saw_delta", "real", 1e-3),
    Option("sa_gamma", "real", 1.0),
    Option("apply_query_scale", "flag", True),
    Option("singleton", "choice", "zero", SINGLETON_RULES),
    Option("calibration", "choice", None, CALIBRATIONS),
    Option("max_weight", "cap"),
    Option("rvpo_k", "positive"),
    # A group without signal (no reward active in it; for GRPO, a constant
    # summed reward): "keep" leaves its rows in the batch statistics, shifted
    # by the batch mean as every trainer does; "zero" gives them advantage 0
    # and leaves them out, as if the group had been filtered.
    Option("no_signal", "choice", "keep", NO_SIGNAL_RULES),
    # The reward columns' names, one per column, so that reward_gates can name them.
    Option("reward_names", "names"),
    # {gated: gate} by name or column index: the gated reward counts for a
    # response only where the gate passes (docs/spec.md#reward-gates). Resolved
    # to (gated, gate) column pairs.
    Option("reward_gates", "gates"),
)
OPTION_NAMES = tuple(o.name for o in OPTIONS)
# The options whose values name or index reward columns, by kind (OptionKind.columns). The option vector
# has one tail after its scalar fields, so at most one option indexes columns: reward_gates.
NAMED_COLUMNS = next((o.name for o in OPTIONS if OPTION_KINDS[o.kind].columns == "named"), None)
COLUMN_OPTIONS = tuple(o.name for o in OPTIONS if OPTION_KINDS[o.kind].columns)  # checked against K
INDEXED_COLUMNS = tuple(o.name for o in OPTIONS if OPTION_KINDS[o.kind].columns == "indexed")
assert len(INDEXED_COLUMNS) <= 1, "the option vector carries one option's column indices"
METHOD_ONLY_OPTIONS: Mapping[str, tuple[str, ...]] = {
    o.name: tuple(m for m, t in METHOD_TRAITS.items() if o.name in t.options)
    for o in OPTIONS if any(o.name in t.options for t in METHOD_TRAITS.values())
}


@dataclass(frozen=True)
class KernelField:
    """One entry of the packed option vector the kernels read (C++ Options,
    the Triton kernels' arguments of the same name). encode maps the resolved
    options to its value; None reads the option of the same name, and
    `absent` stands in for a method-only option the method does not have."""
    name: str
    ctype: str  # "int", "bool" or "double"
    encode: Optional[Callable[[Any], Any]] = None
    absent: float = 0.0


# In packed order: AdvantageOptions.kernel_vector().
KERNEL_FIELDS: tuple[KernelField, ...] = (
    KernelField("method", "int", lambda o: METHOD_CODE[o.method]),
    KernelField("eps", "double"),
    KernelField("unbiased", "bool"),
    KernelField("scale_by_std", "bool"),
    KernelField("batch_norm", "int", lambda o: BATCH_NORM_CODE[o.batch_norm]),
    KernelField("bn_eps", "double"),
    KernelField("nan_to_zero", "bool", lambda o: o.nan_policy == "zero"),
    KernelField("active_tol", "double"),
    KernelField("alpha", "double"),
    KernelField("density_floor", "double"),
    KernelField("saw_delta", "double"),
    KernelField("sa_gamma", "double"),
    KernelField("apply_query_scale", "bool"),
    KernelField("singleton_verl", "bool", lambda o: o.singleton == "verl"),
    # DARA and static: s_j sums Z + (w - 1) [Z]_+ (positive calibration) instead of w Z.
    KernelField("calibration_positive", "bool", lambda o: o.calibration == "positive"),
    KernelField("max_weight", "double", absent=math.inf),
    KernelField("rvpo_k", "double", absent=1.0),
    KernelField("no_signal_zero", "bool", lambda o: o.no_signal == "zero"),
    # Set per call, not an option: the CPU kernel raises on a +-Inf reward
    # that its accumulate pass counted; the Python layer checks for the other
    # backends, and in distributed mode the all-reduced counts are checked
    # (distributed.raise_on_bad_input).
    KernelField("reject_inf", "bool", lambda o: False),
)
OPTION_FIELDS = tuple((f.name, f.ctype) for f in KERNEL_FIELDS)
# After the scalar fields the option vector carries the column indices of the
# option whose kind indexes reward columns (INDEXED_COLUMNS: reward_gates' one
# (gated, gate) pair per gated reward), so it does not depend on K; the kernels
# read it as each reward's gate column, -1 for none (C++ Options::gate, the
# Triton options' `gate`), and `gated` says whether any pair follows.
NO_GATE = -1


def kernel_value(f: KernelField, opts) -> float:
    value = f.encode(opts) if f.encode is not None else getattr(opts, f.name)
    return float(f.absent if value is None else value)


def kernel_vector(opts, reject_inf: bool = False) -> list[float]:
    """The packed option vector of resolved options: KERNEL_FIELDS, then the INDEXED_COLUMNS option's column
    indices. reject_inf: the kernel raises on a +-Inf reward (the CPU kernel's own check)."""
    scalars = [float(reject_inf) if f.name == "reject_inf" else kernel_value(f, opts) for f in KERNEL_FIELDS]
    return scalars + [float(column) for name in INDEXED_COLUMNS
                      for entry in getattr(opts, name) or () for column in entry]


# Groups that carry signal: some reward active; the weighted summed reward
# varies; rewards active while that sum is constant (docs/spec.md#group-signal).
# Adjacent accumulator slots and outputs of the same names.
SIGNAL_COUNTS = ("informative_groups", "sum_informative_groups", "conflict_groups")

# Batch accumulators, summed across ranks. Sizes are in K reward columns and C
# combined columns (combined_columns).
ACCUMULATOR_SEGMENTS = (
    ("groups", "1"),          # B
    ("rows", "1"),            # kept, scorable responses
    ("token_total", "1"),     # sum of L_j over those rows
    # Bad input, counted so that after the all-reduce every rank sees it and
    # raises the same error (no rank is left waiting in a collective).
    ("infinite_rewards", "1"),  # +-Inf entries
    ("missing_rewards", "1"),   # NaN entries after reward_gates (an error under nan_policy="raise")
    ("negative_lengths", "1"),  # response_lengths below 0
    *((name, "1") for name in SIGNAL_COUNTS),
    ("active", "K"),          # active groups per reward
    ("energy", "K"),          # sum_j A_jk^2
    ("raw_count", "K"),       # valid raw entries per reward
    ("raw_sum", "K"),
    ("raw_sum_sq", "K"),
    ("group_weight", "K"),    # DVAO: sum over groups of w_gk
    ("signal", "C"),          # sum over rows of each combined column
    ("token_signal", "C"),    # the same, token-weighted
    ("cross", "CC"),          # sum over rows of a_c * a_d
    ("token_cross", "CC"),    # the same, token-weighted
)
# Extremes reduce with MAX, so they travel in a second vector.
EXTREMA_SEGMENTS = (
    ("max_reward", "K"),
    ("max_negated_reward", "K"),  # max of -r_k, i.e. minus the batch minimum
)


@dataclass(frozen=True)
class GroupField:
    """One array of the per-group table accumulate writes and apply reads, in
    group order: `size` "K" (one per reward) or "1" per group. A field with
    `when` (a METHOD_PREDICATES name) is filled only for those methods and is
    one element otherwise, so every backend has a pointer to pass."""
    name: str
    size: str
    dtype: str  # "float64" or "uint8"
    when: Optional[str] = None


# The group statistics in double: each row's r - mu is taken in double, and
# the scales and weights are rounded to the row type where a kernel reads them,
# the same way in accumulate and apply.
GROUP_TABLE: tuple[GroupField, ...] = (
    GroupField("mean", "K", "float64"),                       # mu_gk
    GroupField("scale", "K", "float64"),                      # A_jk = (r_jk - mu_gk) scale_gk; 0 when inactive
    GroupField("weight", "K", "float64", "group_weighted"),   # DVAO's w_gk
    GroupField("sum_mean", "1", "float64", "summed_reward"),  # GRPO's summed column
    GroupField("sum_scale", "1", "float64", "summed_reward"),
    GroupField("kappa", "1", "float64"),                      # the group's kept share (GD2PO-Hard)
    GroupField("signal", "1", "uint8"),                       # GroupSignal bits (docs/spec.md#group-signal)
)


def group_field_size(f: GroupField, groups: int, k: int, method: str) -> int:
    if f.when is not None and method not in METHOD_PREDICATES[f.when]:
        return 1
    return groups * (k if f.size == "K" else 1)


# AdvantageOutput's fields in the order every kernel returns them. Shapes: N
# rows, NT the mask's [N, T] ([0] without a mask), K rewards, "" a scalar.
OUTPUT_FIELDS = (
    ("advantages", "N", "float32"),
    ("token_advantages", "NT", "float32"),
    ("density", "K", "float32"),
    ("weights", "K", "float32"),
    ("energy", "K", "float32"),
    ("weighted_energy", "K", "float32"),
    ("active_groups", "K", "int64"),
    ("num_groups", "", "int64"),
    ("batch_mean", "", "float32"),
    ("batch_std", "", "float32"),
    ("keep", "N", "bool"),
    ("query_scale", "N", "float32"),
    ("informative", "N", "bool"),      # the row's group has an active reward
    ("sum_informative", "N", "bool"),  # the row's group's weighted summed reward varies
    *((name, "", "int64") for name in SIGNAL_COUNTS),
)

# The schemas of the compiled ops, which every kernel library registers: dara:: (csrc/ops.cpp, through
# core/generated_tables.h) and the Triton backend's dara_triton:: (triton/library.py).
_OP_INPUTS = ("Tensor rewards, Tensor? group_index, int group_size, Tensor reward_weights, Tensor? response_mask, "
              "Tensor? response_lengths")
FUSED_ADVANTAGE_SCHEMA = (
    f"fused_advantage({_OP_INPUTS}, Tensor? reward_bounds, Tensor? accumulators, Tensor? extrema, float[] options) "
    f"-> ({', '.join(f'Tensor {name}' for name, _, _ in OUTPUT_FIELDS)})")
ACCUMULATE_SCHEMA = f"accumulate({_OP_INPUTS}, float[] options) -> (Tensor accumulators, Tensor extrema)"


def max_combined_columns(k: int) -> int:
    """The most combined columns any mode has for K rewards (COLUMN_MODES): the
    size of the kernels' per-row column arrays."""
    return max(per_reward * k + constant for per_reward, constant in COLUMN_MODES.values())


_VECTOR_FIELD = {f.name: i for i, f in enumerate(KERNEL_FIELDS)}


def vector_field(options, name: str) -> float:
    """One scalar field of a packed option vector (kernel_vector), by its KERNEL_FIELDS name."""
    return options[_VECTOR_FIELD[name]]


def vector_columns(options, k: int) -> int:
    """C of a call, from its packed option vector."""
    method = METHODS[int(vector_field(options, "method"))]
    return combined_columns(method, k, bool(vector_field(options, "calibration_positive")))


def _size(kind: str, k: int, c: int) -> int:
    return {"1": 1, "K": k, "C": c, "CC": c * c}[kind]


def segment_offsets(segments, k: int, c: int) -> dict[str, int]:
    offsets, start = {}, 0
    for name, kind in segments:
        offsets[name] = start
        start += _size(kind, k, c)
    offsets["size"] = start
    return offsets


def accumulator_sizes(k: int, c: int) -> tuple[int, int]:
    """(accumulators, extrema) lengths for K rewards and C combined columns."""
    return segment_offsets(ACCUMULATOR_SEGMENTS, k, c)["size"], segment_offsets(EXTREMA_SEGMENTS, k, c)["size"]
