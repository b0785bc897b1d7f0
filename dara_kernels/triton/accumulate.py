"""Accumulate stage: each program walks groups pid, pid + P, ... and writes
its partial batch accumulators and extremes (tables.store_accumulators and
store_extrema, generated from their layout); the per-group table (`table`,
tables.GroupTable: means, scales, DVAO weights, GRPO's summed-column
statistics, kappa, signal bits) is left for apply. Partials are summed in
program order by finalize, so results are deterministic. Lanes: common.py."""
import triton
import triton.language as tl

from . import generated_tables as tables
from .common import (
    ANY_ACTIVE,
    SUM_ACTIVE,
    ZEROED,
    finish_column,
    group_bounds,
    group_count,
    group_signal,
    load_tile,
    reward_lanes,
    row_columns,
    row_reward_sum,
)


# Sizes are not specialised (Triton would make 1 a constexpr and a multiple of 16 a hint): the variants
# launched are those scripts/check_triton_compiles.py compiles, whatever the batch.
@triton.jit(do_not_specialize=("K", "C", "group_size", "contiguous_groups"))
def accumulate_kernel(
    rewards_ptr, rows_ptr, offsets_ptr, group_count_ptr, base_ptr, token_ptr, table, partial_ptr, extrema_ptr,
    K, C, group_size, contiguous_groups, has_token, opts,
    HAS_INDEX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    num_groups = group_count(group_count_ptr, contiguous_groups, HAS_INDEX)
    method = tl.cast(opts.method, tl.int32)
    combined = tables.summed_reward(method)
    group_weighted = tables.group_weighted(method)
    drops = tables.drops_conflicts(method)
    raw = tables.raw_extremes(method)
    kk, kr, kmask, base, gate, has_gate = reward_lanes(opts, base_ptr, K, BLOCK_K)
    zero_k = tl.zeros([BLOCK_K], dtype=tl.float64)
    zero = tl.full((), 0.0, tl.float64)
    # Counts are kept in int32, a register each rather than a double's two: the 8-lane
    # accumulate sat at its register cap.
    none_k = tl.zeros([BLOCK_K], dtype=tl.int32)
    none = tl.full((), 0, tl.int32)
    groups = none
    informative_groups = none
    sum_informative_groups = none
    conflict_groups = none
    rows = none
    token_total = zero
    infinite_v = none_k
    missing_v = none_k
    active_v = none_k
    energy_v = zero_k
    count_v = none_k
    sum_sq_v = zero_k
    raw_sum_v = zero_k
    weight_v = zero_k
    signal_v = zero_k
    token_signal_v = zero_k
    cross_m = tl.zeros([BLOCK_K, BLOCK_K], dtype=tl.float64)
    token_cross_m = tl.zeros([BLOCK_K, BLOCK_K], dtype=tl.float64)
    max_v = tl.full([BLOCK_K], float("-inf"), tl.float64)
    max_negated_v = tl.full([BLOCK_K], float("-inf"), tl.float64)
    # What the row formulas read for a method without DVAO weights or GRPO's summed column.
    no_weight = tl.zeros([BLOCK_K], dtype=tl.float32)
    no_scale = tl.full((), 0.0, tl.float32)
    for g in range(pid, num_groups, programs):
        begin, end = group_bounds(offsets_ptr, g, group_size, HAS_INDEX)
        size = (end - begin).to(tl.float64)
        count = zero_k
        total = zero_k
        sum_count = zero
        sum_total = zero
        for r0 in range(begin, end, BLOCK_R):
            x, valid, idx, rmask = load_tile(rewards_ptr, rows_ptr, r0, end, K, kr, kmask, gate, has_gate, opts,
                                             HAS_INDEX, BLOCK_R)
            xv = tl.where(valid, x, 0.0)
            count += tl.sum(valid.to(tl.float64), 0)
            total += tl.sum(xv, 0)
            infinite_v += tl.sum((valid & (tl.abs(x) == float("inf"))).to(tl.int32), 0)
            # The weighted summed reward (GRPO's column, every method's signal test).
            scorable = tl.sum(valid.to(tl.int32), 1) > 0
            sum_count += tl.sum(scorable.to(tl.float64), 0)
            sum_total += tl.sum(row_reward_sum(x, valid, base), 0)
            if raw:
                sum_sq_v += tl.sum(xv * xv, 0)
                max_v = tl.maximum(max_v, tl.max(tl.where(valid, x, float("-inf")), 0))
                max_negated_v = tl.maximum(max_negated_v, tl.max(tl.where(valid, -x, float("-inf")), 0))
        # Entries that do not count (NaN, unless scored as 0).
        missing_v += tl.where(kmask, size - count, 0.0).to(tl.int32)
        mean = total / tl.maximum(count, 1.0)
        sum_mean = sum_total / tl.maximum(sum_count, 1.0)
        dev = zero_k
        sum_dev = zero
        for r0 in range(begin, end, BLOCK_R):
            x, valid, idx, rmask = load_tile(rewards_ptr, rows_ptr, r0, end, K, kr, kmask, gate, has_gate, opts,
                                             HAS_INDEX, BLOCK_R)
            d = tl.where(valid, x - mean[None, :], 0.0)
            dev += tl.sum(d * d, 0)
            scorable = tl.sum(valid.to(tl.int32), 1) > 0
            dr = row_reward_sum(x, valid, base) - sum_mean
            sum_dev += tl.sum(tl.where(scorable, dr * dr, 0.0), 0)
        mean, std, scale64, active = finish_column(count, mean, dev, opts)
        # The row formulas use the scale rounded to float32, as apply rounds the table's.
        scale = scale64.to(tl.float32)
        tl.store(table.mean + g * K + kr, mean, mask=kmask)
        tl.store(table.scale + g * K + kr, scale64, mask=kmask)
        active_v += active.to(tl.int32)
        count_v += count.to(tl.int32)
        raw_sum_v += total
        weight = no_weight
        if group_weighted:
            spread = tl.where(kmask, base * std, 0.0)
            spread_total = tl.sum(spread, 0)
            dvao_weight = tl.where(spread_total != 0.0, spread / tl.where(spread_total != 0.0, spread_total, 1.0),
                                   0.0)
            weight = dvao_weight.to(tl.float32)
            tl.store(table.weight + g * K + kr, dvao_weight, mask=kmask)
            weight_v += dvao_weight
        sum_mean, sum_std, sum_scale64, sum_active = finish_column(sum_count, sum_mean, sum_dev, opts)
        sum_scale = no_scale
        if combined:
            sum_scale = sum_scale64.to(tl.float32)
            tl.store(table.sum_mean + g, sum_mean)
            tl.store(table.sum_scale + g, sum_scale64)
        signal = group_signal(tl.sum(active.to(tl.int32), 0) > 0, sum_active, opts)
        tl.store(table.signal + g, signal.to(tl.uint8))
        informative_groups += ((signal & ANY_ACTIVE) != 0).to(tl.int32)
        sum_informative_groups += ((signal & SUM_ACTIVE) != 0).to(tl.int32)
        conflict_groups += ((signal & (ANY_ACTIVE | SUM_ACTIVE)) == ANY_ACTIVE).to(tl.int32)
        counted = (signal & ZEROED) == 0
        groups += 1
        kept = size.to(tl.float32)
        for r0 in range(begin, end, BLOCK_R):
            x, valid, idx, rmask = load_tile(rewards_ptr, rows_ptr, r0, end, K, kr, kmask, gate, has_gate, opts,
                                             HAS_INDEX, BLOCK_R)
            a, col, scorable, keep = row_columns(x, valid, mean, scale, weight, base, sum_mean, sum_scale,
                                                 kk, kmask, K, opts, BLOCK_K > tables.MAX_REWARDS)
            energy_v += tl.sum(a * a, 0).to(tl.float64)
            if drops:
                kept -= tl.sum((~keep & rmask).to(tl.float32), 0)
            selected = keep & scorable & rmask & counted
            # The column sums and products in double: finalize takes the batch
            # variance as a difference of these sums, which cancels when the
            # batch has little spread (in float: 5.6e-4 of batch_std where it is 0).
            col = tl.where(selected[:, None], col, 0.0).to(tl.float64)
            rows += tl.sum(selected.to(tl.int32), 0)
            signal_v += tl.sum(col, 0)
            outer = col[:, :, None] * col[:, None, :]
            cross_m += tl.sum(outer, 0)
            if has_token != 0:
                w = tl.load(token_ptr + idx, mask=rmask, other=0.0).to(tl.float64)
                w = tl.where(selected, w, 0.0)
                token_total += tl.sum(w, 0)
                token_signal_v += tl.sum(col * w[:, None], 0)
                token_cross_m += tl.sum(outer * w[:, None, None], 0)
        tl.store(table.kappa + g, (kept / size.to(tl.float32)).to(tl.float64))
    # The Python distributed driver counts negative lengths into their slot.
    tables.store_accumulators(
        partial_ptr + pid * tables.accumulator_size(K, C), K, C, kk, kr, kmask,
        groups=groups, rows=rows, token_total=token_total, infinite_rewards=tl.sum(infinite_v, 0),
        missing_rewards=tl.sum(missing_v, 0), negative_lengths=zero, informative_groups=informative_groups,
        sum_informative_groups=sum_informative_groups, conflict_groups=conflict_groups, active=active_v,
        energy=energy_v, raw_count=count_v, raw_sum=raw_sum_v, raw_sum_sq=sum_sq_v, group_weight=weight_v,
        signal=signal_v, token_signal=token_signal_v, cross=cross_m, token_cross=token_cross_m)
    tables.store_extrema(extrema_ptr + pid * tables.extrema_size(K, C), K, C, kk, kr, kmask,
                         max_reward=max_v, max_negated_reward=max_negated_v)
