"""Finalize stage, one program: sums the partial accumulators in program
order, then the K-sized formulas of docs/spec.md#batch-statistics, #weights
and #batch-normalisation. Writes the reported diagnostics and the affine map
apply uses: combine[C], shift, scale. The method and batch norm are runtime
values: this program runs once per call, so branching costs nothing."""
import triton
import triton.language as tl

from . import generated_tables as tables
from .generated_tables import BATCH_NORM_RESPONSE, BATCH_NORM_TOKEN, DARA, DVAO, SA_MRPO, SAW

# Below this fraction of the sum of squares, a variance is the rounding error
# of a constant reward (the same threshold as csrc/core/finalize.h).
CONSTANT_REWARD_RTOL = tl.constexpr(1e-12)


@triton.jit
def _slot(partial_ptr, programs, M, offset, idx, mask):
    total = tl.zeros(idx.shape, dtype=tl.float64)
    for p in range(programs):
        total += tl.load(partial_ptr + p * M + offset + idx, mask=mask, other=0.0)
    return total


@triton.jit
def _extreme(extrema_ptr, programs, stride, offset, kk, kmask):
    best = tl.full(kk.shape, float("-inf"), tl.float64)
    for p in range(programs):
        best = tl.maximum(best, tl.load(extrema_ptr + p * stride + offset + kk, mask=kmask, other=float("-inf")))
    return best


@triton.jit
def _power(x, exponent):
    """x ** exponent for x >= 0, as IEEE pow: 0 ** 0 = 1, 0 ** e is 0 for e > 0 and +inf for e < 0."""
    safe = tl.where(x > 0.0, x, 1.0)
    at_zero = tl.where(exponent == 0.0, 1.0, tl.where(exponent > 0.0, 0.0, float("inf")))
    return tl.where(x > 0.0, tl.exp(exponent * tl.log(safe)), at_zero)


@triton.jit
def _dara_weights(base, density, kmask, alpha, density_floor, max_weight):
    """w_k = b_k min(max_weight, (pi'_k / max_l pi'_l)^(-alpha)), pi'_k =
    max(pi_k, density_floor); the ratio is 0 when every pi'_l is, so a reward
    active nowhere gets b_k max_weight."""
    floored = tl.where(kmask, tl.maximum(density, density_floor), 0.0)
    top = tl.max(floored, 0)
    # Lanes without a reward take ratio 1, so they make no 0 * inf.
    ratio = tl.where(kmask, tl.where(top > 0.0, floored / tl.where(top > 0.0, top, 1.0), 0.0), 1.0)
    return tl.where(kmask, base * tl.minimum(_power(ratio, -alpha), max_weight), 0.0)


# Sizes are not specialised (Triton would make 1 a constexpr and a multiple of 16 a hint): the variants
# launched are those scripts/check_triton_compiles.py compiles, whatever the batch.
@triton.jit(do_not_specialize=("programs", "K", "C"))
def finalize_kernel(
    partial_ptr, extrema_ptr, programs, K, C, base_ptr, bounds_ptr,
    density_ptr, weights_ptr, energy_ptr, weighted_energy_ptr, active_groups_ptr, num_groups_ptr, signal_counts,
    batch_mean_ptr, batch_std_ptr, affine_ptr, has_bounds, opts,
    BLOCK_K: tl.constexpr,
):
    """signal_counts: the outputs of tables.SIGNAL_COUNTS, in that order (a tuple of pointers)."""
    # Lanes as in accumulate (common.py): combined column c in lane c, reward k in lane k + positive.
    method = tl.cast(opts.method, tl.int32)
    batch_norm = tl.cast(opts.batch_norm, tl.int32)
    bn_eps = opts.bn_eps
    positive = tl.cast(opts.calibration_positive, tl.int32)
    kk = tl.arange(0, BLOCK_K)
    kr = kk - positive
    kmask = (kr >= 0) & (kr < K)
    first = kk == 0
    cmask = kk < C
    M = tables.accumulator_size(K, C)
    base = tl.load(base_ptr + kr, mask=kmask, other=0.0)
    groups = tl.sum(_slot(partial_ptr, programs, M, tables.groups_at(K, C), kk, first), 0)
    rows = tl.sum(_slot(partial_ptr, programs, M, tables.rows_at(K, C), kk, first), 0)
    token_total = tl.sum(_slot(partial_ptr, programs, M, tables.token_total_at(K, C), kk, first), 0)
    # The group-signal counts (tables.SIGNAL_COUNTS): adjacent slots, read as one vector (three scalar
    # reads made every variant spill 20-36 bytes).
    slots = tl.arange(0, tables.SIGNAL_BLOCK)
    counts = _slot(partial_ptr, programs, M, tables.informative_groups_at(K, C), slots, slots < tables.SIGNAL_COUNTS)
    active = _slot(partial_ptr, programs, M, tables.active_at(K, C), kr, kmask)
    energy = _slot(partial_ptr, programs, M, tables.energy_at(K, C), kr, kmask)
    count = _slot(partial_ptr, programs, M, tables.raw_count_at(K, C), kr, kmask)
    total = _slot(partial_ptr, programs, M, tables.raw_sum_at(K, C), kr, kmask)
    total_sq = _slot(partial_ptr, programs, M, tables.raw_sum_sq_at(K, C), kr, kmask)
    group_weight = _slot(partial_ptr, programs, M, tables.group_weight_at(K, C), kr, kmask)
    signal = _slot(partial_ptr, programs, M, tables.signal_at(K, C), kk, cmask)
    token_signal = _slot(partial_ptr, programs, M, tables.token_signal_at(K, C), kk, cmask)
    cc = kk[:, None] * C + kk[None, :]
    mask2 = cmask[:, None] & cmask[None, :]
    cross = _slot(partial_ptr, programs, M, tables.cross_at(K, C), cc, mask2)
    token_cross = _slot(partial_ptr, programs, M, tables.token_cross_at(K, C), cc, mask2)

    density = tl.where(groups > 0.0, active / tl.maximum(groups, 1.0), 0.0)
    # Every method's weights are computed and one is selected: a handful of
    # K-sized operations, and no branch whose types must agree.
    dara_weights = _dara_weights(base, density, kmask, opts.alpha, opts.density_floor, opts.max_weight)

    raw_mean = tl.where(count > 0.0, total / tl.maximum(count, 1.0), 0.0)
    bounded = kmask & ((kk * 0 + has_bounds) != 0)
    lo = tl.where(bounded, tl.load(bounds_ptr + 2 * kr, mask=bounded, other=0.0),
                  -_extreme(extrema_ptr, programs, tables.extrema_size(K, C), tables.max_negated_reward_at(K, C),
                            kr, kmask))
    hi = tl.where(bounded, tl.load(bounds_ptr + 2 * kr + 1, mask=bounded, other=0.0),
                  _extreme(extrema_ptr, programs, tables.extrema_size(K, C), tables.max_reward_at(K, C), kr, kmask))
    ss = total_sq - count * raw_mean * raw_mean
    raw_std = tl.where((count >= 2.0) & (ss > total_sq * CONSTANT_REWARD_RTOL),
                       tl.sqrt(tl.maximum(ss, 0.0) / tl.maximum(count - 1.0, 1.0)), 0.0)
    shifted = raw_mean - lo + opts.saw_delta
    defined = kmask & (count > 0.0) & (shifted != 0.0)
    cv = tl.where(defined, raw_std / tl.where(defined, shifted, 1.0), 0.0)
    cv_total = tl.sum(cv, 0)
    saw_weights = tl.where(cv_total != 0.0, base * K * cv / tl.where(cv_total != 0.0, cv_total, 1.0), 0.0)
    span = hi - lo
    spread = (count > 0.0) & (span > 0.0)
    saturation = tl.where(spread, tl.minimum(tl.maximum((raw_mean - lo) / tl.where(spread, span, 1.0), 0.0), 1.0),
                          0.0)
    sa_mrpo_weights = base * _power(1.0 - saturation, opts.sa_gamma)
    dvao_weights = tl.where(groups > 0.0, group_weight / tl.maximum(groups, 1.0), 0.0)

    weights = tl.where(method == DARA, dara_weights,
                       tl.where(method == SAW, saw_weights,
                                tl.where(method == SA_MRPO, sa_mrpo_weights,
                                         tl.where(method == DVAO, dvao_weights, base))))
    weights = tl.where(kmask, weights, 0.0)

    # Reward k's part of s_j is u_k A_jk + v_k [A_jk]_+ (docs/spec.md#aggregation):
    # w_k A_jk, or A_jk + (w_k - 1) [A_jk]_+ under positive calibration, with
    # b_k in place of a DARA weight w_k where pi_k = 0.
    applied = tl.where((method == DARA) & (density == 0.0), base, weights)
    u = tl.where(positive != 0, 1.0, applied)
    v = tl.where(positive != 0, applied - 1.0, 0.0)
    # Reward k's column: DVAO's sum_j (w_gk A_jk)^2, or sum_j [A_jk]_+^2 under positive calibration.
    diag = tl.sum(tl.where(kk[:, None] == kk[None, :], cross, 0.0), 1)
    # sum_j (u A + v [A]_+)^2, where sum_j A [A]_+ = sum_j [A]_+^2.
    calibrated_energy = u * u * energy + tl.where(positive != 0, (2.0 * u * v + v * v) * diag, 0.0)
    weighted_energy = tl.where(tables.group_weighted(method), diag,
                               tl.where(tables.one_column(method), base * base * energy, calibrated_energy))
    combine = tl.where(tables.group_weighted(method), tl.where(kmask, 1.0, 0.0),
                       tl.where(tables.one_column(method), tl.where(first, 1.0, 0.0),
                                tl.where(positive != 0, tl.where(first, 1.0, v), u)))
    combine = tl.where(cmask, combine, 0.0)

    s1 = tl.sum(combine * signal, 0)
    s2 = tl.sum(tl.sum(combine[:, None] * combine[None, :] * cross, 1), 0)
    t1 = tl.sum(combine * token_signal, 0)
    t2 = tl.sum(tl.sum(combine[:, None] * combine[None, :] * token_cross, 1), 0)
    token_mean = tl.where(token_total > 0.0, t1 / tl.where(token_total > 0.0, token_total, 1.0), 0.0)
    token_var = tl.where(token_total > 1.0, tl.maximum(t2 - token_total * token_mean * token_mean, 0.0)
                         / tl.where(token_total > 1.0, token_total - 1.0, 1.0), 0.0)
    response_mean = tl.where(rows > 0.0, s1 / tl.maximum(rows, 1.0), 0.0)
    response_std = tl.where(rows >= 2.0, tl.sqrt(tl.maximum(s2 - rows * response_mean * response_mean, 0.0)
                                                 / tl.maximum(rows - 1.0, 1.0)), 0.0)
    by_token = batch_norm == BATCH_NORM_TOKEN
    mean = tl.where(by_token, token_mean, response_mean)
    std = tl.where(by_token, tl.sqrt(token_var), response_std)
    shift = tl.where(by_token | (batch_norm == BATCH_NORM_RESPONSE), mean, 0.0)
    scale = tl.where(by_token, 1.0 / tl.sqrt(token_var + bn_eps),
                     tl.where(batch_norm == BATCH_NORM_RESPONSE, 1.0 / (response_std + bn_eps), 1.0))

    tl.store(density_ptr + kr, density.to(tl.float32), mask=kmask)
    tl.store(weights_ptr + kr, weights.to(tl.float32), mask=kmask)
    tl.store(energy_ptr + kr, energy.to(tl.float32), mask=kmask)
    tl.store(weighted_energy_ptr + kr, weighted_energy.to(tl.float32), mask=kmask)
    tl.store(active_groups_ptr + kr, active.to(tl.int64), mask=kmask)
    tl.store(num_groups_ptr + kk, (groups + kk * 0.0).to(tl.int64), mask=first)
    for i in tl.static_range(tables.SIGNAL_COUNTS):
        tl.store(signal_counts[i] + slots * 0, counts.to(tl.int64), mask=slots == i)
    tl.store(batch_mean_ptr + kk, (mean + kk * 0.0).to(tl.float32), mask=first)
    tl.store(batch_std_ptr + kk, (std + kk * 0.0).to(tl.float32), mask=first)
    tl.store(affine_ptr + kk, combine, mask=cmask)
    tl.store(affine_ptr + C + kk, shift + kk * 0.0, mask=first)
    tl.store(affine_ptr + C + 1 + kk, scale + kk * 0.0, mask=first)
