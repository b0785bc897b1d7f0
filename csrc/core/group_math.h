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
  double mean;   // mu_gk (0 for a verl singleton)
  double std;    // sigma_gk (0 when n_gk < 2, 1 for a verl singleton)
  double scale;  // A_jk = (r_jk - mean) * scale; 0 for an inactive pair
  bool active;
};

// sum_sq_dev is sum over valid entries of (r - mean)^2, mean = sum / count.
DARA_HD ColumnStats finish_column(double count, double mean, double sum_sq_dev, const Options& o) {
  ColumnStats s;
  double divisor = o.unbiased ? count - 1.0 : count;
  s.std = count >= 2.0 ? sqrt(sum_sq_dev / divisor) : 0.0;
  s.mean = mean;
  s.active = count >= 2.0 && s.std > o.active_tol;
  bool singleton = count == 1.0 && o.singleton_verl;
  if (singleton) {
    s.mean = 0.0;
    s.std = 1.0;
  }
  bool used = s.active || singleton;
  s.scale = used ? (o.scale_by_std ? 1.0 / (s.std + o.eps) : 1.0) : 0.0;
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
