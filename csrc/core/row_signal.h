// One response seen through its group's statistics: per-reward A_jk, the
// combined columns a_c that s_j sums, and whether the row is scorable and
// kept. Every compiled backend's accumulate and apply call this, so they
// agree on every row.
#pragma once
#include "group_math.h"
#include "host_device.h"
#include "wire.h"

namespace dara {

// A group's statistics as apply and the row pass read them.
struct GroupRef {
  const double* mean;    // [K]
  const double* scale;   // [K]
  const double* weight;  // [K] DVAO w_gk, else nullptr
  double sum_mean;       // GRPO summed column
  double sum_scale;
};

struct RowSignal {
  bool scorable;
  bool keep;
};

// r: the row's K raw rewards (NaN = missing).
template <int KT>
DARA_HD RowSignal row_signal(const double* r, int K, const Options& o, const double* base,
                             const GroupRef& group, double* reward_a, double* column_a) {
  if constexpr (KT > 0) K = KT;
  bool scorable = false, positive = false, negative = false;
  double rsum = 0.0;
  for (int k = 0; k < K; ++k) {
    const double x = clean_reward(r[k], o);
    const bool valid = x == x;
    const double a = valid ? (x - group.mean[k]) * group.scale[k] : 0.0;
    reward_a[k] = a;
    scorable |= valid;
    positive |= a > 0.0;
    negative |= a < 0.0;
    rsum += valid ? base[k] * x : 0.0;
  }
  if (o.combined_column()) {
    column_a[0] = scorable ? (rsum - group.sum_mean) * group.sum_scale : 0.0;
  } else if (group.weight) {
    for (int k = 0; k < K; ++k) column_a[k] = group.weight[k] * reward_a[k];
  } else {
    for (int k = 0; k < K; ++k) column_a[k] = reward_a[k];
  }
  return {scorable, !(o.drops_conflicts() && positive && negative)};
}

}  // namespace dara
