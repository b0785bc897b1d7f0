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

// The pieces of a column's statistics. Each is selects between doubles, with
// no branch and no boolean arithmetic, so the CPU kernel runs them across
// groups in SIMD lanes (a division by a zero divisor is computed and then not
// selected).

// The size of a group that verl treats as a singleton (mean 0, std 1): 1
// under singleton_verl, else -1, which no group has.
DARA_HD double singleton_size(const Options& o) { return o.singleton_verl ? 1.0 : -1.0; }

// sigma_gk from sum_sq_dev, the sum over valid entries of (r - mean)^2: 0
// when n_gk < 2, 1 for a verl singleton.
DARA_HD double column_std(double count, double sum_sq_dev, const Options& o) {
  const double divisor = count - (o.unbiased ? 1.0 : 0.0);
  const double spread = sqrt(count >= 2.0 ? sum_sq_dev / divisor : 0.0);
  return count == singleton_size(o) ? 1.0 : spread;
}

// 1 for an active pair, else 0.
DARA_HD double column_active(double count, double std, const Options& o) {
  return count >= 2.0 ? (std > o.active_tol ? 1.0 : 0.0) : 0.0;
}

// mu_gk as A_jk uses it: 0 for a verl singleton.
DARA_HD double column_mean(double count, double mean, const Options& o) {
  return count == singleton_size(o) ? 0.0 : mean;
}

// A_jk = (r_jk - mean) * scale: 0 for an inactive pair.
DARA_HD double column_scale(double count, double std, const Options& o) {
  const double used = o.scale_by_std ? 1.0 / (std + o.eps) : 1.0;
  return count == singleton_size(o) ? used : (column_active(count, std, o) != 0.0 ? used : 0.0);
}

// mean = sum / count over the valid entries.
DARA_HD ColumnStats finish_column(double count, double mean, double sum_sq_dev, const Options& o) {
  ColumnStats s;
  s.std = column_std(count, sum_sq_dev, o);
  s.active = column_active(count, s.std, o);
  s.mean = column_mean(count, mean, o);
  s.scale = column_scale(count, s.std, o);
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
