"""Apply stage: the second and last read of the rewards; writes advantages,
keep and query_scale (docs/spec.md#batch-normalisation, #query-scale). The
[N, T] token output is one elementwise product done by torch, so the mask's
dtype does not multiply the kernel variants."""
import triton
import triton.language as tl

from . import generated_tables as tables
from .common import ANY_ACTIVE, SUM_ACTIVE, ZEROED, group_bounds, group_count, load_tile, reward_lanes, row_columns


# Sizes are not specialised (Triton would make 1 a constexpr and a multiple of 16 a hint): the variants
# launched are those scripts/check_triton_compiles.py compiles, whatever the batch.
@triton.jit(do_not_specialize=("K", "C", "group_size", "contiguous_groups"))
def apply_kernel(
    rewards_ptr, rows_ptr, offsets_ptr, group_count_ptr, base_ptr, table, affine_ptr,
    advantages_ptr, keep_ptr, query_scale_ptr, informative_ptr, sum_informative_ptr,
    K, C, group_size, contiguous_groups, opts,
    HAS_INDEX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    num_groups = group_count(group_count_ptr, contiguous_groups, HAS_INDEX)
    method = tl.cast(opts.method, tl.int32)
    combined = tables.summed_reward(method)
    kk, kr, kmask, base, gate, has_gate = reward_lanes(opts, base_ptr, K, BLOCK_K)
    combine = tl.load(affine_ptr + kk, mask=kk < C, other=0.0).to(tl.float32)
    shift = tl.load(affine_ptr + C).to(tl.float32)
    batch_scale = tl.load(affine_ptr + C + 1).to(tl.float32)
    for g in range(pid, num_groups, programs):
        begin, end = group_bounds(offsets_ptr, g, group_size, HAS_INDEX)
        mean = tl.load(table.mean + g * K + kr, mask=kmask, other=0.0)
        scale = tl.load(table.scale + g * K + kr, mask=kmask, other=0.0).to(tl.float32)
        weight = tl.load(table.weight + g * K + kr, mask=kmask & tables.group_weighted(method + kk * 0),
                         other=0.0).to(tl.float32)
        sum_mean = tl.load(table.sum_mean + g, mask=combined, other=0.0)
        sum_scale = tl.load(table.sum_scale + g, mask=combined, other=0.0).to(tl.float32)
        kappa = tl.load(table.kappa + g).to(tl.float32)
        signal = tl.load(table.signal + g).to(tl.int32)
        any_active = (signal & ANY_ACTIVE) != 0
        sum_active = (signal & SUM_ACTIVE) != 0
        counted = (signal & ZEROED) == 0
        factor = tl.where(opts.apply_query_scale != 0, batch_scale * kappa, batch_scale)
        for r0 in range(begin, end, BLOCK_R):
            x, valid, idx, rmask = load_tile(rewards_ptr, rows_ptr, r0, end, K, kr, kmask, gate, has_gate, opts,
                                             HAS_INDEX, BLOCK_R)
            a, col, scorable, keep = row_columns(x, valid, mean, scale, weight, base, sum_mean, sum_scale,
                                                 kk, kmask, K, opts, BLOCK_K > tables.MAX_REWARDS)
            s = tl.sum(col * combine[None, :], 1)
            value = tl.where(keep & scorable & counted, (s - shift) * factor, 0.0)
            tl.store(advantages_ptr + idx, value, mask=rmask)
            tl.store(keep_ptr + idx, keep, mask=rmask)
            tl.store(query_scale_ptr + idx, kappa + value * 0.0, mask=rmask)
            tl.store(informative_ptr + idx, rmask & any_active, mask=rmask)
            tl.store(sum_informative_ptr + idx, rmask & sum_active, mask=rmask)
