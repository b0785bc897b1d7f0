"""The one definition of every table the Python, C++ and Triton code share:
method and batch-norm codes, the packed option vector, the accumulator wire
format (what ranks all-reduce, docs/spec.md#distributed-mode), the output
fields and the per-backend reward-column limits.

`csrc/core/wire.h` and `dara_kernels/triton/wire.py` are generated from this
file (`python scripts/generate_wire.py`); `tests/test_wire.py` fails when either
is stale, so no copy can drift.
"""
from __future__ import annotations

METHODS = ("grpo", "gdpo", "static", "dara", "dvao", "saw", "sa_mrpo", "gd2po_hard")
METHOD_CODE = {name: code for code, name in enumerate(METHODS)}

BATCH_NORMS = ("none", "response", "token")
BATCH_NORM_CODE = {name: code for code, name in enumerate(BATCH_NORMS)}
_BATCH_NORM_CPP = {"none": "kNoBatchNorm", "response": "kResponseNorm", "token": "kTokenNorm"}

# (name in the kernels, C++ type) in packed order: AdvantageOptions.kernel_vector().
OPTION_FIELDS = (
    ("method", "int"),
    ("eps", "double"),
    ("unbiased", "bool"),
    ("scale_by_std", "bool"),
    ("batch_norm", "int"),
    ("bn_eps", "double"),
    ("nan_to_zero", "bool"),
    ("active_tol", "double"),
    ("alpha", "double"),
    ("density_floor", "double"),
    ("saw_delta", "double"),
    ("sa_gamma", "double"),
    ("apply_query_scale", "bool"),
    ("singleton_verl", "bool"),
    # DARA and static: s_j sums Z + (w - 1) [Z]_+ (positive calibration) instead of w Z.
    ("calibration_positive", "bool"),
    ("max_weight", "double"),
    # The CPU kernel raises on a +-Inf reward that its accumulate pass counted;
    # the Python layer checks for the other backends, and in distributed mode
    # the all-reduced counts are checked (distributed.raise_on_bad_input).
    ("reject_inf", "bool"),
)

# Batch accumulators, summed across ranks. Sizes are in K reward columns and C
# combined columns (combined_columns: 1 for GRPO's summed column, K + 1 under
# positive calibration, else K).
ACCUMULATOR_SEGMENTS = (
    ("groups", "1"),          # B
    ("rows", "1"),            # kept, scorable responses
    ("token_total", "1"),     # sum of L_j over those rows
    # Bad input, counted so that after the all-reduce every rank sees it and
    # raises the same error (no rank is left waiting in a collective).
    ("infinite_rewards", "1"),  # +-Inf entries
    ("missing_rewards", "1"),   # NaN entries (an error under nan_policy="raise")
    ("negative_lengths", "1"),  # response_lengths below 0
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

# AdvantageOutput's fields in the order every kernel returns them.
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
)

# Reward columns each compiled backend handles: the CPU and CUDA kernels keep
# per-reward state in fixed-size arrays, and Triton holds a reward row in one
# power-of-two block.
MAX_REWARDS = {"cpu": 64, "cuda": 16, "triton": 16}


def _size(kind: str, k: int, c: int) -> int:
    return {"1": 1, "K": k, "C": c, "CC": c * c}[kind]


def segment_offsets(segments, k: int, c: int) -> dict[str, int]:
    offsets, start = {}, 0
    for name, kind in segments:
        offsets[name] = start
        start += _size(kind, k, c)
    offsets["size"] = start
    return offsets


def combined_columns(method: str, k: int, positive: bool = False) -> int:
    """C: GRPO's one summed column; under positive calibration sum_k A_jk and
    then each [A_jk]_+ (s_j = sum_k A_jk + sum_k (w_k - 1) [A_jk]_+ is a
    linear form in these K + 1 columns); else each A_jk."""
    if method == "grpo":
        return 1
    return k + 1 if positive else k


def accumulator_sizes(k: int, c: int) -> tuple[int, int]:
    """(accumulators, extrema) lengths for K rewards and C combined columns."""
    return segment_offsets(ACCUMULATOR_SEGMENTS, k, c)["size"], segment_offsets(EXTREMA_SEGMENTS, k, c)["size"]


# ---- generation -------------------------------------------------------------

def _symbolic_starts(segments):
    """Each segment's start as coefficients of (1, K, C, C*C)."""
    coeff = {"1": (1, 0, 0, 0), "K": (0, 1, 0, 0), "C": (0, 0, 1, 0), "CC": (0, 0, 0, 1)}
    start, out = [0, 0, 0, 0], []
    for name, kind in segments:
        out.append((name, kind, tuple(start)))
        start = [a + b for a, b in zip(start, coeff[kind])]
    return out, tuple(start)


def _expression(coefficients) -> str:
    terms = []
    for coef, symbol in zip(coefficients, ("", "K", "C", "C * C")):
        if not coef:
            continue
        if not symbol:
            terms.append(str(coef))
        else:
            terms.append(symbol if coef == 1 else f"{coef} * {symbol}")
    return " + ".join(terms) if terms else "0"


def _plus(base: str, term: str) -> str:
    return term if base == "0" else f"{base} + {term}"


def _cpp_camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_HEADER_NOTE = "Generated by `python scripts/generate_wire.py` from dara_kernels/wire.py: do not edit."

_OPTION_PREDICATES = """\
  DARA_HD bool combined_column() const { return method == kGrpo; }
  DARA_HD bool group_weighted() const { return method == kDvao; }
  DARA_HD bool drops_conflicts() const { return method == kGd2poHard; }
  // SAW and SA-MRPO: the batch's raw sums of squares and extremes.
  DARA_HD bool raw_extremes() const { return method == kSaw || method == kSaMrpo; }
  // sum_k A_jk, then each [A_jk]_+ (DARA and static, calibration="positive").
  DARA_HD bool positive_parts() const { return calibration_positive; }
  // C: the columns s_j is a linear form in (wire.combined_columns).
  DARA_HD int combined_columns(int K) const { return combined_column() ? 1 : positive_parts() ? K + 1 : K; }
"""


def _cpp_layout_struct(struct: str, segments, extra: str = "") -> list[str]:
    lines = [f"struct {struct} {{", "  int K;", "  int C;", ""]
    starts, total = _symbolic_starts(segments)
    for name, kind, start in starts:
        base = _expression(start)
        if kind == "1":
            lines.append(f"  DARA_HD int {name}() const {{ return {base}; }}")
        elif kind in ("K", "C"):
            arg = "k" if kind == "K" else "c"
            lines.append(f"  DARA_HD int {name}(int {arg}) const {{ return {_plus(base, arg)}; }}")
        else:
            lines.append(f"  DARA_HD int {name}(int c, int d) const {{ return {_plus(base, 'c * C + d')}; }}")
    lines.append(f"  DARA_HD int size() const {{ return {_expression(total)}; }}")
    lines.extend(extra.splitlines())
    lines.append("};")
    return lines


def cpp_header() -> str:
    lines = [f"// {_HEADER_NOTE}", "// The tables every compiled backend shares with Python (docs/architecture.md).",
             "#pragma once", '#include "host_device.h"', "", "namespace dara {", ""]
    lines.append("enum Method : int {")
    lines += [f"  k{_cpp_camel(m)} = {c}," for m, c in METHOD_CODE.items()]
    lines += ["};", "", "enum BatchNorm : int {"]
    lines += [f"  {_BATCH_NORM_CPP[b]} = {c}," for b, c in BATCH_NORM_CODE.items()]
    lines += ["};", ""]
    lines += [f"constexpr int kMax{_cpp_camel(b)}Rewards = {v};" for b, v in MAX_REWARDS.items()]
    lines += ["", f"constexpr int kNumOptions = {len(OPTION_FIELDS)};", "", "struct Options {"]
    lines += [f"  {ctype} {name};" for name, ctype in OPTION_FIELDS]
    lines += ["", *_OPTION_PREDICATES.rstrip("\n").splitlines(), "};", ""]
    lines += ["DARA_HD Options options_from_vector(const double* v) {", "  Options o;"]
    for i, (name, ctype) in enumerate(OPTION_FIELDS):
        value = {"int": f"static_cast<int>(v[{i}])", "bool": f"v[{i}] != 0.0", "double": f"v[{i}]"}[ctype]
        lines.append(f"  o.{name} = {value};")
    lines += ["  return o;", "}", "",
              "// The batch accumulators, as one flat vector of doubles that ranks sum with one all-reduce;",
              "// extremes (MAX-reduced) follow in a second vector of extrema_size() doubles."]
    extrema_starts, extrema_total = _symbolic_starts(EXTREMA_SEGMENTS)
    extra = [""]
    for name, _, start in extrema_starts:
        extra.append(f"  DARA_HD int {name}(int k) const {{ return {_plus(_expression(start), 'k')}; }}")
    extra.append(f"  DARA_HD int extrema_size() const {{ return {_expression(extrema_total)}; }}")
    lines += _cpp_layout_struct("AccumulatorLayout", ACCUMULATOR_SEGMENTS, "\n".join(extra))
    lines += ["", "enum OutputField : int {"]
    lines += [f"  kOut{_cpp_camel(name)} = {i}," for i, (name, _, _) in enumerate(OUTPUT_FIELDS)]
    lines += [f"  kNumOutputs = {len(OUTPUT_FIELDS)},", "};", ""]
    lines += ["// The outputs by name; a binding fills one and output_at() reads it in schema order.",
              "template <typename T>", "struct OutputsOf {"]
    lines += [f"  T {name};" for name, _, _ in OUTPUT_FIELDS]
    lines += ["};", "", "template <typename T>", "const T& output_at(const OutputsOf<T>& o, int field) {",
              "  switch (field) {"]
    for name, _, _ in OUTPUT_FIELDS[:-1]:
        lines += [f"    case kOut{_cpp_camel(name)}:", f"      return o.{name};"]
    last = OUTPUT_FIELDS[-1][0]
    lines += ["    default:", f"      return o.{last};", "  }", "}", ""]
    returns = [f"Tensor {name}" for name, _, _ in OUTPUT_FIELDS]
    lines += ["// Schemas of the registered ops (csrc/ops.cpp).",
              "constexpr const char* kFusedAdvantageSchema =",
              '    "fused_advantage(Tensor rewards, Tensor? group_index, int group_size, Tensor reward_weights, "',
              '    "Tensor? response_mask, Tensor? response_lengths, Tensor? reward_bounds, Tensor? accumulators, "',
              '    "Tensor? extrema, float[] options) -> ("']
    chunks = [", ".join(returns[i:i + 4]) for i in range(0, len(returns), 4)]
    lines += [f'    "{chunk}, "' for chunk in chunks[:-1]] + [f'    "{chunks[-1]})";']
    lines += [
              "constexpr const char* kAccumulateSchema =",
              '    "accumulate(Tensor rewards, Tensor? group_index, int group_size, Tensor reward_weights, "',
              '    "Tensor? response_mask, Tensor? response_lengths, float[] options) "',
              '    "-> (Tensor accumulators, Tensor extrema)";', "", "}  // namespace dara", ""]
    return "\n".join(lines)


def triton_module() -> str:
    lines = [f'"""{_HEADER_NOTE}', "", "Codes and accumulator offsets for the Triton kernels (docs/architecture.md).",
             '"""', "import triton", "import triton.language as tl", ""]
    lines += [f"{m.upper()} = tl.constexpr({c})" for m, c in METHOD_CODE.items()]
    lines += [f"BATCH_NORM_{b.upper()} = tl.constexpr({c})" for b, c in BATCH_NORM_CODE.items()]
    lines += [f"MAX_REWARDS = tl.constexpr({MAX_REWARDS['triton']})", ""]
    for segments in (ACCUMULATOR_SEGMENTS, EXTREMA_SEGMENTS):
        starts, total = _symbolic_starts(segments)
        for name, _, start in starts:
            lines += ["", "@triton.jit", f"def {name}_at(K, C):", f"    return {_expression(start)}", ""]
        size_name = "accumulator_size" if segments is ACCUMULATOR_SEGMENTS else "extrema_size"
        lines += ["", "@triton.jit", f"def {size_name}(K, C):", f"    return {_expression(total)}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


GENERATED = {"csrc/core/wire.h": cpp_header, "dara_kernels/triton/wire.py": triton_module}


def stale_or_write(root, write: bool) -> list[str]:
    """Generated files that differ from what this module renders; rewrites them when `write`."""
    stale = []
    for relative, render in GENERATED.items():
        path = root / relative
        text = render()
        if path.exists() and path.read_text() == text:
            continue
        stale.append(relative)
        if write:
            path.write_text(text)
    return stale
