"""Device helpers shared by the Triton stages: tile loads and the per-column
formulas of docs/spec.md#group-statistics and #normalised-advantage, the same
as csrc/core/group_math.h and row_signal.h.
Options arrive as runtime flags, not constexprs: only the group layout, the
block sizes and the pointer dtypes specialise a kernel, so the whole set of
variants the op can launch stays small enough to compile ahead of time
(scripts/check_triton_compiles.py).

Precision: rewards are read as float64 and a group's sums, mean and spread
stay float64, so a reward far from zero relative to its spread (a reward-model
score, a token count) loses nothing in r - mu; from the centred value on, the
row formulas run in float32.

Lanes: combined column c (wire.combined_columns) is lane c of a row's tile.
Under positive calibration column 0 is sum_k A_jk and reward k sits in lane
k + 1 (its column [A_jk]_+), else reward k sits in lane k; `kr` is each lane's
reward (its lane, less 1 under positive calibration) and `kmask` the lanes
that hold one."""
import triton
import triton.language as tl

from . import wire


@triton.jit
def load_tile(rewards_ptr, rows_ptr, r0, end, K, kr, kmask, nan_to_zero,
              HAS_INDEX: tl.constexpr, BLOCK_R: tl.constexpr):
    """[BLOCK_R, BLOCK_K] rewards of sorted positions r0.. as float64 (reward
    kr in each lane), the valid-entry mask, the rows' indices and the in-group
    row mask."""
    rr = r0 + tl.arange(0, BLOCK_R)
    rmask = rr < end
    if HAS_INDEX:
        idx = tl.load(rows_ptr + rr, mask=rmask, other=0)
    else:
        idx = rr.to(tl.int64)
    m2 = rmask[:, None] & kmask[None, :]
    x = tl.load(rewards_ptr + idx[:, None] * K + kr[None, :], mask=m2, other=float("nan")).to(tl.float64)
    x = tl.where(m2 & (x != x) & (nan_to_zero != 0), 0.0, x)
    valid = m2 & (x == x)
    return x, valid, idx, rmask


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
def finish_column(count, mean, dev, eps, active_tol, unbiased, scale_by_std, singleton_verl):
    """(mean, std, scale, active) in float64 from the valid entries' count,
    mean and sum of squared deviations; scale is 0 when the pair is inactive."""
    divisor = tl.where(unbiased != 0, count - 1.0, count)
    std = tl.where(count >= 2.0, tl.sqrt(dev / tl.maximum(divisor, 1.0)), 0.0)
    active = (count >= 2.0) & (std > active_tol)
    single = (count == 1.0) & (singleton_verl != 0)
    mean = tl.where(single, 0.0, mean)
    std = tl.where(single, 1.0, std)
    used = active | single
    scale = tl.where(used, tl.where(scale_by_std != 0, 1.0 / (std + eps), 1.0), 0.0)
    return mean, std, scale, active


@triton.jit
def row_reward_sum(x, valid, base):
    """GRPO's summed reward sum_k b_k r_jk over each row's valid entries, in
    float64: weights of both signs can cancel it."""
    return tl.sum(tl.where(valid, x * base[None, :], 0.0), 1)


@triton.jit
def soft_minimum(a, base, kmask, K, rvpo_k):
    """RVPO's -(1/k) ln((1/K) sum_k exp(-k z_jk)), z_jk = b_k A_jk, per row, in
    float64, shifted by the row's minimum so that no exponent is positive (k =
    1e3 overflows nothing); float64 keeps the small-k limit (the mean of the
    z_jk) that exp and log would cancel in float32."""
    z = a.to(tl.float64) * base[None, :]
    low = tl.min(tl.where(kmask[None, :], z, float("inf")), 1)
    terms = tl.where(kmask[None, :], tl.exp(-rvpo_k * (z - low[:, None])), 0.0)
    return low - tl.log(tl.sum(terms, 1) / K) / rvpo_k


@triton.jit
def row_columns(x, valid, mean, scale, weight, base, sum_mean, sum_scale, kk, kmask, K, method, positive, rvpo_k):
    """Per-reward A_jk, the row's combined columns by lane and each row's
    scorable/keep flags (docs/spec.md#aggregation). x, mean, base and sum_mean
    are float64; each difference from a mean is taken there and then rounded
    to float32. A method's own work sits behind its runtime predicate
    (wire.METHOD_PREDICATES)."""
    a = tl.where(valid, (x - mean[None, :]).to(tl.float32) * scale[None, :], 0.0)
    scorable = tl.sum(valid.to(tl.int32), 1) > 0
    keep = tl.full(scorable.shape, True, tl.int1)
    if wire.drops_conflicts(method):
        has_positive = tl.sum((a > 0.0).to(tl.int32), 1) > 0
        has_negative = tl.sum((a < 0.0).to(tl.int32), 1) > 0
        keep = ~(has_positive & has_negative)
    col = tl.where(wire.group_weighted(method), a * weight[None, :], a)
    first = kk[None, :] == 0
    if positive != 0:
        col = tl.where(first, tl.sum(a, 1)[:, None], tl.maximum(a, 0.0))
    if wire.summed_reward(method):
        summed = tl.where(scorable, (row_reward_sum(x, valid, base) - sum_mean).to(tl.float32) * sum_scale, 0.0)
        col = tl.where(first, summed[:, None], 0.0)
    if wire.soft_minimum(method):
        col = tl.where(first, soft_minimum(a, base, kmask, K, rvpo_k).to(tl.float32)[:, None], 0.0)
    return a, col, scorable, keep
