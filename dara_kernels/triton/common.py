"""Device helpers shared by the Triton stages: tile loads and the per-column
formulas of docs/spec.md#group-statistics and #normalised-advantage, the same
as csrc/core/group_math.h and row_signal.h.
Options arrive as one runtime argument, `opts` (tables.KernelOptions, the
packed option vector), whose fields the formulas read by name, not as
constexprs: only the group layout, the block sizes and the pointer dtypes
specialise a kernel, so the whole set of variants the op can launch stays
small enough to compile ahead of time (scripts/check_triton_compiles.py).

Precision: rewards are read as float64 and a group's sums, mean and spread
stay float64, so a reward far from zero relative to its spread (a reward-model
score, a token count) loses nothing in r - mu; from the centred value on, the
row formulas run in float32.

Lanes: combined column c (tables.combined_columns) is lane c of a row's tile.
Under positive calibration column 0 is sum_k A_jk and reward k sits in lane
k + 1 (its column [A_jk]_+), else reward k sits in lane k; `kr` is each lane's
reward (its lane, less 1 under positive calibration) and `kmask` the lanes
that hold one."""
import triton
import triton.language as tl

from . import generated_tables as tables


@triton.jit
def reward_lanes(opts, base_ptr, K, BLOCK_K: tl.constexpr):
    """What every tile of a kernel reads by lane (the module's Lanes): each
    lane kk, its reward kr, whether it holds one, that reward's weight b_k in
    float64, and its gate (gate_lanes)."""
    positive = tl.cast(opts.calibration_positive, tl.int32)
    kk = tl.arange(0, BLOCK_K)
    kr = kk - positive
    kmask = (kr >= 0) & (kr < K)
    base = tl.load(base_ptr + kr, mask=kmask, other=0.0).to(tl.float64)
    gate, has_gate = gate_lanes(opts, kr, positive)
    return kk, kr, kmask, base, gate, has_gate


@triton.jit
def gate_lanes(opts, kr, positive):
    """(each lane's gate as the lane it is read from, its own where it has
    none; whether it has one): opts.gate by reward, no gate anywhere
    without opts.gated. Taken once per kernel."""
    source = kr + positive
    has_gate = kr != kr
    for i in tl.static_range(tables.MAX_REWARDS):
        here = (kr == i) & (opts.gate[i] != tables.NO_GATE)
        source = tl.where(here, tl.cast(opts.gate[i], tl.int32) + positive, source)
        has_gate = has_gate | here
    return source, has_gate


@triton.jit
def gated_rewards(x, passes, gate_missing):
    """docs/spec.md#reward-gates, as csrc/core/group_math.h's gated_reward: x
    where the gate passes (> 0); a failing gate makes a present entry 0, a
    missing gate (NaN) makes it missing; a missing entry stays missing and an
    infinite one infinite."""
    keep = passes | (tl.abs(x) == float("inf"))
    return tl.where(keep, x, tl.where(gate_missing | (x != x), float("nan"), 0.0))


@triton.jit
def load_tile(rewards_ptr, rows_ptr, r0, end, K, kr, kmask, gate, has_gate, opts,
              HAS_INDEX: tl.constexpr, BLOCK_R: tl.constexpr):
    """[BLOCK_R, BLOCK_K] rewards of sorted positions r0.. as float64 (reward
    kr in each lane), gated (`gate`, `has_gate`: gate_lanes),
    the valid-entry mask, the rows' indices and the in-group row mask."""
    rr = r0 + tl.arange(0, BLOCK_R)
    rmask = rr < end
    if HAS_INDEX:
        idx = tl.load(rows_ptr + rr, mask=rmask, other=0)
    else:
        idx = rr.to(tl.int64)
    m2 = rmask[:, None] & kmask[None, :]
    x = tl.load(rewards_ptr + idx[:, None] * K + kr[None, :], mask=m2, other=float("nan")).to(tl.float64)
    # The gate's value taken from the tile itself rather than read again: a second masked load per tile made
    # the 8-lane float64 accumulate spill at its register cap; a branch on opts.gated, the 4-lane one.
    gated = m2 & has_gate[None, :]
    g = tl.gather(x, tl.broadcast_to(gate[None, :], x.shape), 1)
    x = tl.where(gated, gated_rewards(x, g > 0.0, g != g), x)
    x = tl.where(m2 & (x != x) & (opts.nan_to_zero != 0), 0.0, x)
    valid = m2 & (x == x)
    return x, valid, idx, rmask


@triton.jit
def group_count(group_count_ptr, contiguous_groups, HAS_INDEX: tl.constexpr):
    """The groups to walk: a group_index's count, on the device; contiguous groups', an argument."""
    if HAS_INDEX:
        count = tl.load(group_count_ptr)
    else:
        count = contiguous_groups
    return count


@triton.jit
def group_bounds(offsets_ptr, g, group_size, HAS_INDEX: tl.constexpr):
    if HAS_INDEX:
        begin = tl.load(offsets_ptr + g)
        end = tl.load(offsets_ptr + g + 1)
    else:
        begin = g * group_size
        end = begin + group_size
    return begin, end


@triton.jit
def finish_column(count, mean, dev, opts):
    """(mean, std, scale, active) in float64 from the valid entries' count,
    mean and sum of squared deviations; scale is 0 when the pair is inactive."""
    divisor = tl.where(opts.unbiased != 0, count - 1.0, count)
    std = tl.where(count >= 2.0, tl.sqrt(dev / tl.maximum(divisor, 1.0)), 0.0)
    active = (count >= 2.0) & (std > opts.active_tol)
    single = (count == 1.0) & (opts.singleton_verl != 0)
    mean = tl.where(single, 0.0, mean)
    std = tl.where(single, 1.0, std)
    used = active | single
    scale = tl.where(used, tl.where(opts.scale_by_std != 0, 1.0 / (std + opts.eps), 1.0), 0.0)
    return mean, std, scale, active


# A group's signal bits (docs/spec.md#group-signal), as csrc/core/group_math.h's GroupSignal.
ANY_ACTIVE = tl.constexpr(1)
SUM_ACTIVE = tl.constexpr(2)
ZEROED = tl.constexpr(4)


@triton.jit
def group_signal(any_active, sum_active, opts):
    """Some reward active; the weighted summed reward varies; and whether
    no_signal="zero" takes the group out (GRPO's own signal is its sum)."""
    signal = tl.where(tables.summed_reward(tl.cast(opts.method, tl.int32)), sum_active, any_active)
    return (tl.where(any_active, ANY_ACTIVE, 0) | tl.where(sum_active, SUM_ACTIVE, 0)
            | tl.where((opts.no_signal_zero != 0) & ~signal, ZEROED, 0))


@triton.jit
def row_reward_sum(x, valid, base):
    """GRPO's summed reward sum_k b_k r_jk over each row's valid entries, in
    float64: weights of both signs can cancel it."""
    return tl.sum(tl.where(valid, x * base[None, :], 0.0), 1)


@triton.jit
def _expm1(x):
    """e^x - 1 without the cancellation of exp(x) - 1 near 0: its series for
    |x| < 0.1 (next term 1.4e-8 of x), Triton's interpreter having no libdevice."""
    series = x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0)))))
    return tl.where(tl.abs(x) < 0.1, series, tl.exp(x) - 1.0)


@triton.jit
def _log1p(t):
    """ln(1 + t) without the cancellation of log(1 + t) near 0: its series for
    |t| < 0.05 (next term 5e-8 of t)."""
    series = t * (1.0 - t * (0.5 - t * (1.0 / 3.0 - t * (0.25 - t * (0.2 - t * (1.0 / 6.0))))))
    return tl.where(tl.abs(t) < 0.05, series, tl.log(1.0 + t))


@triton.jit
def soft_minimum(a, base, kmask, K, rvpo_k):
    """RVPO's -(1/k) ln((1/K) sum_k exp(-k z_jk)), z_jk = b_k A_jk, per row, as
    m - log1p((1/K) sum_k expm1(-k (z_jk - m))) / k with m = min_k z_jk (as
    csrc/core/row_signal.h): no exponent is positive (k = 1e3 overflows
    nothing), and the small-k limit, the mean of the z_jk, keeps its digits.
    float32: float64 exp and log made 12 kernel variants spill."""
    z = a * base.to(tl.float32)[None, :]
    low = tl.min(tl.where(kmask[None, :], z, float("inf")), 1)
    terms = tl.where(kmask[None, :], _expm1(-rvpo_k * (z - low[:, None])), 0.0)
    return low - _log1p(tl.sum(terms, 1) / K) / rvpo_k


@triton.jit
def row_columns(x, valid, mean, scale, weight, base, sum_mean, sum_scale, kk, kmask, K, opts,
                WIDE: tl.constexpr):
    """Per-reward A_jk, the row's combined columns by lane and each row's
    scorable/keep flags (docs/spec.md#aggregation). x, mean, base and sum_mean
    are float64; each difference from a mean is taken there and then rounded
    to float32. A method's own work sits behind its runtime predicate
    (tables.METHOD_PREDICATES). WIDE: a tile of more than MAX_REWARDS lanes,
    which only positive calibration's K + 1 columns need; its methods (dara,
    static) take none of the other methods' row work, so it is left out there
    (with it, the 32-lane accumulate spilled)."""
    method = tl.cast(opts.method, tl.int32)
    a = tl.where(valid, (x - mean[None, :]).to(tl.float32) * scale[None, :], 0.0)
    scorable = tl.sum(valid.to(tl.int32), 1) > 0
    keep = tl.full(scorable.shape, True, tl.int1)
    col = a
    first = kk[None, :] == 0
    if not WIDE:
        if tables.drops_conflicts(method):
            has_positive = tl.sum((a > 0.0).to(tl.int32), 1) > 0
            has_negative = tl.sum((a < 0.0).to(tl.int32), 1) > 0
            keep = ~(has_positive & has_negative)
        col = tl.where(tables.group_weighted(method), a * weight[None, :], a)
    if opts.calibration_positive != 0:
        col = tl.where(first, tl.sum(a, 1)[:, None], tl.maximum(a, 0.0))
    if not WIDE:
        if tables.summed_reward(method):
            summed = tl.where(scorable, (row_reward_sum(x, valid, base) - sum_mean).to(tl.float32) * sum_scale, 0.0)
            col = tl.where(first, summed[:, None], 0.0)
        if tables.soft_minimum(method):
            col = tl.where(first, soft_minimum(a, base, kmask, K, opts.rvpo_k)[:, None], 0.0)
    return a, col, scorable, keep
