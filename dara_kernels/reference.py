"""The oracle: docs/spec.md written as plain float64 PyTorch.

Each function is one section of the spec. Nothing here is fused or clever;
every other backend is tested against this file.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .options import AdvantageOptions
from .output import AdvantageOutput
from .validation import PreparedInputs


def dense_group_ids(inputs: PreparedInputs) -> tuple[torch.Tensor, int]:
    """Row -> group number in [0, B), groups ordered by id."""
    n = inputs.num_rows
    device = inputs.rewards.device
    if inputs.group_index is None:
        size = inputs.group_size
        return torch.arange(n, device=device) // size, n // size
    _, inverse = torch.unique(inputs.group_index, return_inverse=True)
    return inverse, int(inverse.max()) + 1 if n else 0


@dataclass
class GroupStats:
    count: torch.Tensor   # [B, C] valid entries n_gk
    mean: torch.Tensor    # [B, C]
    std: torch.Tensor     # [B, C] (0 where n_gk < 2; 1 for a verl singleton)
    active: torch.Tensor  # [B, C] bool
    singleton: torch.Tensor  # [B, C] bool: the verl rule applies


def gate_rewards(r, opts: AdvantageOptions) -> torch.Tensor:
    """docs/spec.md#reward-gates: each gated reward keeps its value where its
    gate is > 0; where the gate is missing it is missing too, elsewhere 0 (a
    missing entry stays missing). Gates read the rewards before gating (no
    gate is itself gated)."""
    out = r.clone()
    for gated, gate in opts.reward_gates or ():
        value, passes, unknown = r[:, gated], r[:, gate] > 0, torch.isnan(r[:, gate])
        failed = torch.where(torch.isnan(value), value, torch.zeros_like(value))
        out[:, gated] = torch.where(passes, value, torch.where(unknown, float("nan"), failed))
    return out


def group_statistics(x, valid, gid, num_groups, opts: AdvantageOptions) -> GroupStats:
    """docs/spec.md#group-statistics, over the valid entries of each column."""
    columns = x.shape[1]
    zero = torch.zeros(num_groups, columns, dtype=torch.float64, device=x.device)
    xv = torch.where(valid, x, 0.0)
    count = zero.index_add(0, gid, valid.double())
    mean = zero.index_add(0, gid, xv) / count.clamp(min=1)
    dev2 = torch.where(valid, (x - mean[gid]) ** 2, 0.0)
    ss = zero.index_add(0, gid, dev2)
    divisor = count - 1 if opts.unbiased else count
    std = torch.where(count >= 2, (ss / divisor.clamp(min=1)).sqrt(), 0.0)
    active = (count >= 2) & (std > opts.active_tol)
    singleton = (count == 1) & (opts.singleton == "verl")
    mean = torch.where(singleton, 0.0, mean)
    std = torch.where(singleton, 1.0, std)
    return GroupStats(count, mean, std, active, singleton)


def normalise(x, valid, gid, stats: GroupStats, opts: AdvantageOptions) -> torch.Tensor:
    """docs/spec.md#normalised-advantage: A_jk, exactly 0 for missing entries and inactive pairs."""
    centred = x - stats.mean[gid]
    scaled = centred / (stats.std[gid] + opts.eps) if opts.scale_by_std else centred
    used = valid & (stats.active | stats.singleton)[gid]
    return torch.where(used, scaled, 0.0)


def raw_batch_stats(r, valid):
    """docs/spec.md#batch-statistics: count, mean, unbiased std, min and max of the valid raw rewards."""
    count = valid.double().sum(0)
    mean = torch.where(valid, r, 0.0).sum(0) / count.clamp(min=1)
    ss = torch.where(valid, (r - mean) ** 2, 0.0).sum(0)
    std = torch.where(count >= 2, (ss / (count - 1).clamp(min=1)).sqrt(), 0.0)
    lo = torch.where(valid, r, float("inf")).amin(0)
    hi = torch.where(valid, r, float("-inf")).amax(0)
    return count, mean, std, lo, hi


def dara_weights(opts, b, density) -> torch.Tensor:
    """w_k = b_k min(max_weight, (pi'_k / max_l pi'_l)^(-alpha)), pi'_k = max(pi_k, density_floor);
    a ratio with a zero maximum is 0, so a reward active nowhere gets b_k max_weight."""
    floored = density.clamp(min=opts.density_floor)
    top = floored.max()
    ratio = floored / top if top > 0 else torch.zeros_like(floored)
    return b * (ratio ** (-opts.alpha)).clamp(max=opts.max_weight)


def method_weights(opts, b, density, r, valid, bounds) -> torch.Tensor:
    """docs/spec.md#weights for the methods with one weight per reward."""
    if opts.method == "dara":
        return dara_weights(opts, b, density)
    if opts.method in ("saw", "sa_mrpo"):
        count, mean, std, lo, hi = raw_batch_stats(r, valid)
        if bounds is not None:
            lo, hi = bounds[:, 0], bounds[:, 1]
        if opts.method == "saw":
            shifted_mean = mean - lo + opts.saw_delta
            cv = torch.where((count > 0) & (shifted_mean != 0), std / shifted_mean, 0.0)
            total = cv.sum()
            return b * r.shape[1] * cv / total if total != 0 else torch.zeros_like(b)
        span = hi - lo
        sat = torch.where((count > 0) & (span > 0), ((mean - lo) / span).clamp(0, 1), 0.0)
        return b * (1 - sat) ** opts.sa_gamma
    return b.clone()


def calibrated_columns(adv, weights, b, density, opts) -> torch.Tensor:
    """docs/spec.md#aggregation: each reward's part of s_j, w_k A_jk, or
    A_jk + (w_k - 1)[A_jk]_+ under positive calibration; a DARA reward with
    pi_k = 0 takes b_k in place of w_k."""
    if opts.method == "dara":
        weights = torch.where(density > 0, weights, b)
    if opts.calibration == "positive":
        return adv + (weights - 1) * adv.clamp(min=0)
    return adv * weights


def soft_minimum(z, k: float) -> torch.Tensor:
    """docs/spec.md#aggregation, RVPO: -(1/k) ln((1/K) sum_k exp(-k z_jk)) per row."""
    return -(torch.logsumexp(-k * z, dim=1) - torch.log(torch.tensor(float(z.shape[1]), dtype=z.dtype))) / k


def batch_normalise(s, rows, token_weights, opts):
    """docs/spec.md#batch-normalisation over `rows` (kept and scorable); returns (Ahat, m, sd)."""
    sel = s[rows]
    n = sel.numel()
    m = sel.mean() if n else s.new_zeros(())
    sd = sel.std() if n >= 2 else s.new_zeros(())
    if opts.batch_norm == "token":
        w = token_weights[rows]
        total = w.sum()
        m = (w * sel).sum() / total if total > 0 else s.new_zeros(())
        v = (w * (sel - m) ** 2).sum() / total * total / (total - 1) if total > 1 else s.new_zeros(())
        sd = v.sqrt()
        out = (s - m) / (v + opts.bn_eps).sqrt()
    elif opts.batch_norm == "response":
        out = (s - m) / (sd + opts.bn_eps)
    else:
        out = s.clone()
    return torch.where(rows, out, 0.0), m, sd


def reference_advantage(inputs: PreparedInputs, opts: AdvantageOptions) -> AdvantageOutput:
    r = inputs.rewards.double()
    if opts.nan_policy == "zero":
        r = torch.nan_to_num(r, nan=0.0)
    r = gate_rewards(r, opts)
    valid = ~torch.isnan(r)
    scorable = valid.any(1)
    b = inputs.reward_weights.double()
    gid, num_groups = dense_group_ids(inputs)
    n, k = r.shape

    stats = group_statistics(r, valid, gid, num_groups, opts)
    adv = normalise(r, valid, gid, stats, opts)
    active_groups = stats.active.sum(0)
    density = active_groups.double() / num_groups if num_groups else r.new_zeros(k)
    energy = (adv ** 2).sum(0)

    # docs/spec.md#group-signal: the weighted summed reward as one column, for every method.
    rsum = torch.where(valid, r, 0.0) @ b
    col_valid = scorable.unsqueeze(1)
    col = rsum.unsqueeze(1)
    col_stats = group_statistics(col, col_valid, gid, num_groups, opts)
    group_any = stats.active.any(1)
    group_sum = col_stats.active[:, 0]

    if opts.method == "grpo":
        s = normalise(col, col_valid, gid, col_stats, opts)[:, 0]
        weights = b.clone()
        weighted_energy = weights ** 2 * energy
    elif opts.method == "rvpo":
        s = soft_minimum(b * adv, opts.rvpo_k)
        weights = b.clone()
        weighted_energy = weights ** 2 * energy
    elif opts.method == "dvao":
        bs = b * stats.std
        total = bs.sum(1, keepdim=True)
        w_group = torch.where(total != 0, bs / torch.where(total != 0, total, 1.0), 0.0)
        contrib = w_group[gid] * adv
        s = contrib.sum(1)
        weights = w_group.mean(0) if num_groups else r.new_zeros(k)
        weighted_energy = (contrib ** 2).sum(0)
    else:
        weights = method_weights(opts, b, density, r, valid, inputs.reward_bounds)
        columns = calibrated_columns(adv, weights, b, density, opts)
        s = columns.sum(1)
        weighted_energy = (columns ** 2).sum(0)

    if opts.method == "gd2po_hard":
        conflict = (adv > 0).any(1) & (adv < 0).any(1)
        keep = ~conflict
        s = torch.where(keep, s, 0.0)
        group_n = r.new_zeros(num_groups).index_add(0, gid, r.new_ones(n))
        kept_n = r.new_zeros(num_groups).index_add(0, gid, keep.double())
        kappa = (kept_n / group_n)[gid]
    else:
        keep = torch.ones(n, dtype=torch.bool, device=r.device)
        kappa = r.new_ones(n)

    # A group without signal under no_signal="zero": advantage 0, outside the batch statistics.
    signal = group_sum if opts.method == "grpo" else group_any
    counted = signal[gid] if opts.no_signal == "zero" else torch.ones_like(keep)

    token_weights = None
    if inputs.response_mask is not None:
        token_weights = inputs.response_mask.double().sum(1)
    elif inputs.response_lengths is not None:
        token_weights = inputs.response_lengths.double()
    ahat, m, sd = batch_normalise(s, keep & scorable & counted, token_weights, opts)
    if opts.apply_query_scale:
        ahat = ahat * kappa

    token_adv = None
    if inputs.response_mask is not None:
        token_adv = (ahat.unsqueeze(1) * inputs.response_mask.double()).float()
    f32 = torch.float32
    return AdvantageOutput(
        advantages=ahat.float(),
        token_advantages=token_adv,
        density=density.to(f32),
        weights=weights.to(f32),
        energy=energy.to(f32),
        weighted_energy=weighted_energy.to(f32),
        active_groups=active_groups.to(torch.int64),
        num_groups=torch.tensor(num_groups, dtype=torch.int64, device=r.device),
        batch_mean=m.to(f32),
        batch_std=sd.to(f32),
        keep=keep,
        query_scale=kappa.to(f32),
        informative=group_any[gid],
        sum_informative=group_sum[gid],
        informative_groups=group_any.sum().to(torch.int64),
        sum_informative_groups=group_sum.sum().to(torch.int64),
        conflict_groups=(group_any & ~group_sum).sum().to(torch.int64),
    )
