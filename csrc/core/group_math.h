// Per-group formulas of spec sections 2-3, shared by every compiled backend.
// Group statistics come from double sums and stay double; the per-row helpers
// are templated on the row's real type (float on the fast CPU and CUDA paths).
#pragma once
#include <cmath>

#include "host_device.h"
#include "options.h"

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

template <typename Real>
DARA_HD Real clean_reward(Real r, const Options& o) {
  return (o.nan_to_zero && r != r) ? Real(0) : r;
}

}  // namespace dara
