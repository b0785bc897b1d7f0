// Per-group formulas (docs/spec.md#group-statistics, #normalised-advantage),
// shared by the CPU and CUDA kernels.
// Group statistics come from double sums and stay double; the per-row helpers
// are templated on the row's real type (float on the fast CPU and CUDA paths).
#pragma once
#include <cmath>

#include "host_device.h"
#include "wire.h"

namespace dara {

struct ColumnStats {
  double mean;    // mu_gk (0 for a verl singleton)
  double std;     // sigma_gk (0 when n_gk < 2, 1 for a verl singleton)
  double scale;   // A_jk = (r_jk - mean) * scale; 0 for an inactive pair
  double active;  // 1 for an active pair, else 0: a number, since it is summed
};

// The options a column's statistics use, as doubles: the pieces below are
// then selects between doubles, with no branch and no bool loads, so the CPU
// kernel runs them across groups in SIMD lanes (a division by a zero divisor
// is computed and then not selected).
struct ColumnRule {
  double singleton;     // the size of a group verl treats as a singleton (mean 0, std 1): 1, or -1 (none)
  double unbiased;      // 1 for sigma with n - 1, else 0
  double scale_by_std;  // 1 to divide by sigma + eps, else 0
  double eps;
  double active_tol;
};

DARA_HD ColumnRule column_rule(const Options& o) {
  return {o.singleton_verl ? 1.0 : -1.0, o.unbiased ? 1.0 : 0.0, o.scale_by_std ? 1.0 : 0.0, o.eps, o.active_tol};
}

// What the sum of squared deviations is divided by: n_gk, or n_gk - 1 unbiased.
DARA_HD double variance_divisor(double count, const ColumnRule& r) { return count - r.unbiased; }

// sqrt(sum_sq_dev / variance_divisor), 0 when n_gk < 2. Taking the variance
// lets a caller that finishes many columns of one group divide once per
// group, by a reciprocal.
DARA_HD double column_spread(double count, double variance) { return sqrt(count >= 2.0 ? variance : 0.0); }

// sigma_gk: the spread, or 1 for a verl singleton.
DARA_HD double column_std(double count, double spread, const ColumnRule& r) {
  return count == r.singleton ? 1.0 : spread;
}

// 1 for an active pair, else 0. A verl singleton is never active, so the
// spread stands in for sigma.
DARA_HD double column_active(double count, double spread, const ColumnRule& r) {
  return count >= 2.0 && spread > r.active_tol ? 1.0 : 0.0;
}

// mu_gk as A_jk uses it: 0 for a verl singleton.
DARA_HD double column_mean(double count, double mean, const ColumnRule& r) { return count == r.singleton ? 0.0 : mean; }

// A_jk = (r_jk - mean) * scale: 0 unless the pair is active or a verl
// singleton. The divisor is exactly sigma + eps, or 1 without scale_by_std:
// arithmetic on the option, not a select on it (GCC leaves a loop with a
// select on a bool option scalar; tests/test_cpu_isa.py checks).
DARA_HD double column_scale(double count, double std, double active, const ColumnRule& r) {
  const double used = 1.0 / (r.scale_by_std * (std + r.eps) + (1.0 - r.scale_by_std));
  const double scaled = count == r.singleton ? 1.0 : active;
  return scaled != 0.0 ? used : 0.0;
}

// mean = sum / count over the valid entries.
DARA_HD ColumnStats finish_column(double count, double mean, double sum_sq_dev, const Options& o) {
  const ColumnRule r = column_rule(o);
  const double spread = column_spread(count, sum_sq_dev / variance_divisor(count, r));
  ColumnStats s;
  s.std = column_std(count, spread, r);
  s.active = column_active(count, spread, r);
  s.mean = column_mean(count, mean, r);
  s.scale = column_scale(count, s.std, s.active, r);
  return s;
}

// A reward as the formulas see it: *x is r, or 0 for a NaN (missing) entry;
// returns whether the entry counts (present, or NaN scored as 0 under
// nan_policy "zero"). Selects only, no branch, so rows run in SIMD lanes.
template <typename Real>
DARA_HD bool read_reward(Real r, const Options& o, Real* x) {
  const bool present = r == r;
  *x = present ? r : Real(0);
  return present | o.nan_to_zero;
}

// The reward, NaN when it does not count.
template <typename Real>
DARA_HD Real clean_reward(Real r, const Options& o) {
  Real x;
  return read_reward(r, o, &x) ? x : r;
}

// First pass of a group's statistics: one row's valid entries into the
// group's count and sum (double).
template <int KT, typename Real>
DARA_HD void add_row_sums(const Real* r, int K, const Options& o, double* count, double* sum) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) {
    Real x;
    const bool valid = read_reward(r[k], o, &x);
    count[k] += valid ? 1.0 : 0.0;
    sum[k] += valid ? static_cast<double>(x) : 0.0;
  }
}

// Second pass: one row's squared deviations from the group mean (double).
template <int KT, typename Real>
DARA_HD void add_row_deviations(const Real* r, int K, const Options& o, const double* mean, double* dev) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) {
    Real x;
    const bool valid = read_reward(r[k], o, &x);
    const double d = static_cast<double>(x) - mean[k];
    dev[k] += valid ? d * d : 0.0;
  }
}

}  // namespace dara
