// One response seen through its group's statistics: per-reward A_jk, the
// combined columns a_c that s_j sums, and whether the row is scorable and
// kept. Every compiled backend's accumulate and apply call this, so they
// agree on every row. Templated on the row's real type: double on the CPU,
// float on CUDA (double there for float64 rewards); the group mean and GRPO's summed reward stay double there
// too, so that a reward far from zero relative to its spread (a reward-model
// score, a token count) loses no precision in r_jk - mu_gk.
#pragma once
#include "generated_tables.h"
#include "group_math.h"
#include "host_device.h"

namespace dara {

// A group's statistics as apply and the row pass read them.
template <typename Real>
struct GroupRefOf {
  const double* mean;  // [K]
  const Real* scale;   // [K]
  const Real* weight;  // [K] DVAO w_gk, else nullptr
  double sum_mean;     // GRPO summed column
  Real sum_scale;
};

struct RowSignal {
  bool scorable;
  bool keep;
};

// r - mean in double, then in the row's type.
template <typename Real>
DARA_HD Real centred(Real r, double mean) {
  return static_cast<Real>(static_cast<double>(r) - mean);
}

// [a]_+, exactly, and with no select: a + |a| is 2a or 0.
template <typename Real>
DARA_HD Real positive_part(Real a) {
  return Real(0.5) * (a + fabs(a));
}

// GRPO's summed reward sum_k b_k r_k over the row's valid entries, in double
// (weights of both signs can cancel it); *scorable says whether any entry is valid.
template <int KT, typename Real>
DARA_HD double row_reward_sum(const Real* r, int K, const Options& o, const double* base, bool* scorable) {
  if constexpr (KT > 0) K = KT;
  double rsum = 0.0;
  bool any = false;
  for (int k = 0; k < K; ++k) {
    Real x;
    any |= read_reward(r[k], o, &x);
    rsum += base[k] * static_cast<double>(x);  // x is 0 for an entry that does not count
  }
  *scorable = any;
  return rsum;
}

// RVPO's soft minimum -(1/k) ln((1/K) sum_k exp(-k z_k)) of z_k = b_k A_jk,
// taken as m - log1p((1/K) sum_k expm1(-k (z_k - m))) / k with m = min_k z_k:
// every exponent is <= 0 (no overflow at k = 1e3), and expm1/log1p keep the
// small-k limit, the mean of the z_k, where exp and log would cancel (k = 1e-3
// lost three digits that way in float).
template <int KT, typename Real>
DARA_HD Real soft_minimum(const Real* reward_a, int K, const double* base, double risk) {
  if constexpr (KT > 0) K = KT;
  const Real k_risk = static_cast<Real>(risk);
  Real low = static_cast<Real>(base[0]) * reward_a[0];
  for (int k = 1; k < K; ++k) low = fmin(low, static_cast<Real>(base[k]) * reward_a[k]);
  Real total = Real(0);
  for (int k = 0; k < K; ++k) total += expm1(-k_risk * (static_cast<Real>(base[k]) * reward_a[k] - low));
  return low - log1p(total / static_cast<Real>(K)) / k_risk;
}

// r: the row's K raw rewards (NaN = missing). column_a gets the C combined
// columns (AccumulatorLayout): GRPO's normalised summed reward; RVPO's soft
// minimum; DVAO's w_gk A_jk; under positive calibration sum_k A_jk, then
// each [A_jk]_+; else each A_jk.
template <int KT, Columns M = Columns::kRuntime, typename Real>
DARA_HD RowSignal row_signal(const Real* r, int K, const Options& o, const double* base, const GroupRefOf<Real>& group,
                             Real* reward_a, Real* column_a) {
  if constexpr (KT > 0) K = KT;
  const Columns mode = M == Columns::kRuntime ? o.columns() : M;
  bool scorable = false, positive = false, negative = false;
  double rsum = 0.0;  // GRPO's summed reward, as row_reward_sum adds it
  for (int k = 0; k < K; ++k) {
    Real x;
    const bool valid = read_reward(r[k], o, &x);
    const Real a = valid ? centred(x, group.mean[k]) * group.scale[k] : Real(0);
    reward_a[k] = a;
    scorable |= valid;
    positive |= a > Real(0);
    negative |= a < Real(0);
    if (mode == Columns::kSummed) rsum += base[k] * static_cast<double>(x);
  }
  if (mode == Columns::kSummed) {
    column_a[0] = scorable ? static_cast<Real>(rsum - group.sum_mean) * group.sum_scale : Real(0);
  } else if (mode == Columns::kSoftMinimum) {
    column_a[0] = soft_minimum<KT>(reward_a, K, base, o.rvpo_k);
  } else if (mode == Columns::kGroupWeighted) {
    for (int k = 0; k < K; ++k) column_a[k] = group.weight[k] * reward_a[k];
  } else if (mode == Columns::kPositiveParts) {
    Real total = Real(0);
    for (int k = 0; k < K; ++k) {
      total += reward_a[k];
      column_a[1 + k] = positive_part(reward_a[k]);
    }
    column_a[0] = total;
  } else {
    for (int k = 0; k < K; ++k) column_a[k] = reward_a[k];
  }
  return {scorable, !(o.drops_conflicts() && positive && negative)};
}

// The advantage apply writes: s_j = sum_c combine_c a_c, whitened by the
// batch affine map and the query scale; 0 for a dropped or unscorable row.
// A select, not a product with a 0/1 flag: factor is infinite when
// bn_eps = 0 and the batch has no spread, and a dropped row must stay 0.
template <int CT, typename Real>
DARA_HD Real row_advantage(const RowSignal& rs, const Real* column_a, int C, const Real* combine, Real shift,
                           Real factor) {
  if constexpr (CT > 0) C = CT;
  Real s = Real(0);
  for (int c = 0; c < C; ++c) s += combine[c] * column_a[c];
  return rs.keep && rs.scorable ? (s - shift) * factor : Real(0);
}

}  // namespace dara
