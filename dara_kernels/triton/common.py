"""Device helpers shared by the Triton stages: tile loads and the per-column
formulas of spec sections 2-3."""
import triton
import triton.language as tl


@triton.jit
def load_tile(rewards_ptr, rows_ptr, r0, end, K, kk, kmask,
              HAS_INDEX: tl.constexpr, NAN_TO_ZERO: tl.constexpr, BLOCK_R: tl.constexpr):
    """[BLOCK_R, BLOCK_K] rewards of sorted positions r0.. as float32, the
    valid-entry mask, the rows' indices and the in-group row mask."""
    rr = r0 + tl.arange(0, BLOCK_R)
    rmask = rr < end
    if HAS_INDEX:
        idx = tl.load(rows_ptr + rr, mask=rmask, other=0)
    else:
        idx = rr.to(tl.int64)
    m2 = rmask[:, None] & kmask[None, :]
    x = tl.load(rewards_ptr + idx[:, None] * K + kk[None, :], mask=m2, other=float("nan")).to(tl.float32)
    if NAN_TO_ZERO:
        x = tl.where(m2 & (x != x), 0.0, x)
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
def finish_column(count, mean, dev, eps, active_tol,
                  UNBIASED: tl.constexpr, SCALE_BY_STD: tl.constexpr, SINGLETON_VERL: tl.constexpr):
    """(mean, std, scale, active) of spec sections 2-3; scale is 0 when inactive."""
    if UNBIASED:
        divisor = count - 1.0
    else:
        divisor = count
    std = tl.where(count >= 2.0, tl.sqrt(dev / tl.maximum(divisor, 1.0)), 0.0)
    active = (count >= 2.0) & (std > active_tol)
    used = active
    if SINGLETON_VERL:
        single = count == 1.0
        mean = tl.where(single, 0.0, mean)
        std = tl.where(single, 1.0, std)
        used = used | single
    if SCALE_BY_STD:
        scale = tl.where(used, 1.0 / (std + eps), 0.0)
    else:
        scale = tl.where(used, 1.0, 0.0)
    return mean, std, scale, active


@triton.jit
def row_columns(x, valid, mean, scale, weight, base, sum_mean, sum_scale, kk,
                COMBINED: tl.constexpr, GROUP_WEIGHTED: tl.constexpr, DROPS: tl.constexpr):
    """Per-reward A_jk, the combined columns a_c, and each row's scorable/keep flags."""
    a = tl.where(valid, (x - mean[None, :]) * scale[None, :], 0.0)
    scorable = tl.sum(valid.to(tl.int32), 1) > 0
    if DROPS:
        positive = tl.sum((a > 0.0).to(tl.int32), 1) > 0
        negative = tl.sum((a < 0.0).to(tl.int32), 1) > 0
        keep = ~(positive & negative)
    else:
        keep = scorable | ~scorable
    if COMBINED:
        rsum = tl.sum(tl.where(valid, x * base[None, :], 0.0), 1)
        v = tl.where(scorable, (rsum - sum_mean) * sum_scale, 0.0)
        col = tl.where(kk[None, :] == 0, v[:, None], 0.0)
    elif GROUP_WEIGHTED:
        col = a * weight[None, :]
    else:
        col = a
    return a, col, scorable, keep
