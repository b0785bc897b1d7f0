"""Finalize stage, one program: sums the partial accumulators in program
order, then the K-sized formulas of spec sections 4, 5 and 7. Writes the
reported diagnostics and the affine map apply uses: combine[C], shift, scale."""
import triton
import triton.language as tl

GRPO, GDPO, STATIC, DARA, DVAO, SAW, SA_MRPO, GD2PO_HARD = range(8)


@triton.jit
def _slot(partial_ptr, programs, M, offset, idx, mask):
    total = tl.zeros(idx.shape, dtype=tl.float64)
    for p in range(programs):
        total += tl.load(partial_ptr + p * M + offset + idx, mask=mask, other=0.0)
    return total


@triton.jit
def _extreme(extrema_ptr, programs, K, offset, kk, kmask):
    best = tl.full(kk.shape, float("-inf"), tl.float64)
    for p in range(programs):
        best = tl.maximum(best, tl.load(extrema_ptr + p * 2 * K + offset + kk, mask=kmask, other=float("-inf")))
    return best


@triton.jit
def _power(x, exponent):
    """x ** exponent for x >= 0 (0 ** 0 = 1)."""
    safe = tl.where(x > 0.0, x, 1.0)
    return tl.where(x > 0.0, tl.exp(exponent * tl.log(safe)), tl.where(exponent == 0.0, 1.0, 0.0))


@triton.jit
def finalize_kernel(
    partial_ptr, extrema_ptr, programs, M, K, base_ptr, bounds_ptr,
    density_ptr, weights_ptr, energy_ptr, weighted_energy_ptr, active_ptr, num_groups_ptr,
    batch_mean_ptr, batch_std_ptr, affine_ptr,
    alpha, density_floor, saw_delta, sa_gamma, bn_eps,
    METHOD: tl.constexpr, BATCH_NORM: tl.constexpr, HAS_BOUNDS: tl.constexpr, BLOCK_K: tl.constexpr,
):
    kk = tl.arange(0, BLOCK_K)
    kmask = kk < K
    first = kk == 0
    if METHOD == GRPO:
        C = 1
    else:
        C = K
    cmask = kk < C
    base = tl.load(base_ptr + kk, mask=kmask, other=0.0)
    groups = tl.sum(_slot(partial_ptr, programs, M, 0, kk, first), 0)
    rows = tl.sum(_slot(partial_ptr, programs, M, 1, kk, first), 0)
    token_total = tl.sum(_slot(partial_ptr, programs, M, 2, kk, first), 0)
    active = _slot(partial_ptr, programs, M, 3, kk, kmask)
    energy = _slot(partial_ptr, programs, M, 3 + K, kk, kmask)
    count = _slot(partial_ptr, programs, M, 3 + 2 * K, kk, kmask)
    total = _slot(partial_ptr, programs, M, 3 + 3 * K, kk, kmask)
    total_sq = _slot(partial_ptr, programs, M, 3 + 4 * K, kk, kmask)
    group_weight = _slot(partial_ptr, programs, M, 3 + 5 * K, kk, kmask)
    signal = _slot(partial_ptr, programs, M, 3 + 6 * K, kk, cmask)
    token_signal = _slot(partial_ptr, programs, M, 3 + 6 * K + C, kk, cmask)
    cc = kk[:, None] * C + kk[None, :]
    mask2 = cmask[:, None] & cmask[None, :]
    cross = _slot(partial_ptr, programs, M, 3 + 6 * K + 2 * C, cc, mask2)
    token_cross = _slot(partial_ptr, programs, M, 3 + 6 * K + 2 * C + C * C, cc, mask2)

    density = tl.where(groups > 0.0, active / tl.maximum(groups, 1.0), 0.0)
    if METHOD == DARA:
        present = kmask & (density > 0.0)
        inv = tl.where(present, _power(tl.maximum(density, density_floor), -alpha), 0.0)
        n_present = tl.sum(present.to(tl.float64), 0)
        mean_inv = tl.sum(inv, 0) / tl.maximum(n_present, 1.0)
        weights = tl.where(present, base * inv / tl.where(mean_inv > 0.0, mean_inv, 1.0), 0.0)
    elif METHOD == SAW or METHOD == SA_MRPO:
        raw_mean = tl.where(count > 0.0, total / tl.maximum(count, 1.0), 0.0)
        if HAS_BOUNDS:
            lo = tl.load(bounds_ptr + 2 * kk, mask=kmask, other=0.0)
            hi = tl.load(bounds_ptr + 2 * kk + 1, mask=kmask, other=0.0)
        else:
            hi = _extreme(extrema_ptr, programs, K, 0, kk, kmask)
            lo = -_extreme(extrema_ptr, programs, K, K, kk, kmask)
        if METHOD == SAW:
            ss = total_sq - count * raw_mean * raw_mean
            raw_std = tl.where((count >= 2.0) & (ss > 1e-12 * total_sq),
                               tl.sqrt(tl.maximum(ss, 0.0) / tl.maximum(count - 1.0, 1.0)), 0.0)
            shifted = raw_mean - lo + saw_delta
            defined = kmask & (count > 0.0) & (shifted != 0.0)
            cv = tl.where(defined, raw_std / tl.where(defined, shifted, 1.0), 0.0)
            cv_total = tl.sum(cv, 0)
            weights = tl.where(cv_total != 0.0, base * K * cv / tl.where(cv_total != 0.0, cv_total, 1.0), 0.0)
        else:
            span = hi - lo
            ok = (count > 0.0) & (span > 0.0)
            sat = tl.where(ok, tl.minimum(tl.maximum((raw_mean - lo) / tl.where(ok, span, 1.0), 0.0), 1.0), 0.0)
            weights = base * _power(1.0 - sat, sa_gamma)
    elif METHOD == DVAO:
        weights = tl.where(groups > 0.0, group_weight / tl.maximum(groups, 1.0), 0.0)
    else:
        weights = base

    diag = tl.sum(tl.where(kk[:, None] == kk[None, :], cross, 0.0), 1)
    if METHOD == DVAO:
        weighted_energy = diag
        combine = tl.where(kmask, 1.0, 0.0)
    elif METHOD == GRPO:
        weighted_energy = weights * weights * energy
        combine = tl.where(first, 1.0, 0.0)
    else:
        weighted_energy = weights * weights * energy
        combine = weights
    combine = tl.where(cmask, combine, 0.0)

    s1 = tl.sum(combine * signal, 0)
    s2 = tl.sum(tl.sum(combine[:, None] * combine[None, :] * cross, 1), 0)
    if BATCH_NORM == 2:
        t1 = tl.sum(combine * token_signal, 0)
        t2 = tl.sum(tl.sum(combine[:, None] * combine[None, :] * token_cross, 1), 0)
        mean = tl.where(token_total > 0.0, t1 / tl.maximum(token_total, 1e-300), 0.0)
        var = tl.where(token_total > 1.0,
                       tl.maximum(t2 - token_total * mean * mean, 0.0) / tl.maximum(token_total - 1.0, 1e-300), 0.0)
        std = tl.sqrt(var)
        shift = mean
        scale = 1.0 / tl.sqrt(var + bn_eps)
    else:
        mean = tl.where(rows > 0.0, s1 / tl.maximum(rows, 1.0), 0.0)
        std = tl.where(rows >= 2.0,
                       tl.sqrt(tl.maximum(s2 - rows * mean * mean, 0.0) / tl.maximum(rows - 1.0, 1.0)), 0.0)
        if BATCH_NORM == 1:
            shift = mean
            scale = 1.0 / (std + bn_eps)
        else:
            shift = mean * 0.0
            scale = shift + 1.0

    tl.store(density_ptr + kk, density.to(tl.float32), mask=kmask)
    tl.store(weights_ptr + kk, weights.to(tl.float32), mask=kmask)
    tl.store(energy_ptr + kk, energy.to(tl.float32), mask=kmask)
    tl.store(weighted_energy_ptr + kk, weighted_energy.to(tl.float32), mask=kmask)
    tl.store(active_ptr + kk, active.to(tl.int64), mask=kmask)
    tl.store(num_groups_ptr + kk, (groups + kk * 0.0).to(tl.int64), mask=first)
    tl.store(batch_mean_ptr + kk, (mean + kk * 0.0).to(tl.float32), mask=first)
    tl.store(batch_std_ptr + kk, (std + kk * 0.0).to(tl.float32), mask=first)
    tl.store(affine_ptr + kk, combine, mask=cmask)
    tl.store(affine_ptr + C + kk, shift + kk * 0.0, mask=first)
    tl.store(affine_ptr + C + 1 + kk, scale + kk * 0.0, mask=first)
