"""Apply stage: the second and last read of the rewards; writes advantages,
keep, query_scale and, with a mask, the [N, T] token advantages once."""
import triton
import triton.language as tl

from .common import group_bounds, load_tile, row_columns


@triton.jit
def apply_kernel(
    rewards_ptr, rows_ptr, offsets_ptr, num_groups_ptr, base_ptr,
    mean_ptr, scale_ptr, weight_ptr, sum_stats_ptr, kappa_ptr, affine_ptr, mask_ptr,
    advantages_ptr, keep_ptr, query_scale_ptr, token_ptr,
    K, C, T, group_size,
    HAS_INDEX: tl.constexpr, HAS_MASK: tl.constexpr, COMBINED: tl.constexpr,
    GROUP_WEIGHTED: tl.constexpr, DROPS: tl.constexpr, NAN_TO_ZERO: tl.constexpr,
    QUERY_SCALE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    num_groups = tl.load(num_groups_ptr)
    kk = tl.arange(0, BLOCK_K)
    kmask = kk < K
    base = tl.load(base_ptr + kk, mask=kmask, other=0.0).to(tl.float32)
    combine = tl.load(affine_ptr + kk, mask=kk < C, other=0.0).to(tl.float32)
    shift = tl.load(affine_ptr + C).to(tl.float32)
    scale_b = tl.load(affine_ptr + C + 1).to(tl.float32)
    tt = tl.arange(0, BLOCK_T)
    for g in range(pid, num_groups, programs):
        begin, end = group_bounds(offsets_ptr, g, group_size, HAS_INDEX)
        mean = tl.load(mean_ptr + g * K + kk, mask=kmask, other=0.0)
        scale = tl.load(scale_ptr + g * K + kk, mask=kmask, other=0.0)
        weight = base
        if GROUP_WEIGHTED:
            weight = tl.load(weight_ptr + g * K + kk, mask=kmask, other=0.0)
        sum_mean = 0.0
        sum_scale = 0.0
        if COMBINED:
            sum_mean = tl.load(sum_stats_ptr + 2 * g)
            sum_scale = tl.load(sum_stats_ptr + 2 * g + 1)
        kappa = tl.load(kappa_ptr + g)
        factor = scale_b
        if QUERY_SCALE:
            factor = factor * kappa
        for r0 in range(begin, end, BLOCK_R):
            x, valid, idx, rmask = load_tile(rewards_ptr, rows_ptr, r0, end, K, kk, kmask,
                                             HAS_INDEX, NAN_TO_ZERO, BLOCK_R)
            a, col, scorable, keep = row_columns(x, valid, mean, scale, weight, base, sum_mean, sum_scale,
                                                 kk, COMBINED, GROUP_WEIGHTED, DROPS)
            s = tl.sum(col * combine[None, :], 1)
            value = tl.where(keep & scorable, (s - shift) * factor, 0.0)
            tl.store(advantages_ptr + idx, value, mask=rmask)
            tl.store(keep_ptr + idx, keep, mask=rmask)
            tl.store(query_scale_ptr + idx, kappa + value * 0.0, mask=rmask)
            if HAS_MASK:
                for t0 in range(0, T, BLOCK_T):
                    cols = t0 + tt
                    m2 = rmask[:, None] & (cols[None, :] < T)
                    offs = idx[:, None] * T + cols[None, :]
                    m = tl.load(mask_ptr + offs, mask=m2, other=0).to(tl.float32)
                    tl.store(token_ptr + offs, value[:, None] * m, mask=m2)
