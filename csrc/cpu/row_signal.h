// One response seen through its group's statistics: per-reward A_jk, the
// combined columns a_c that s_j sums, and whether the row is scorable and
// kept. Accumulate and apply both call this, so they agree on every row.
#pragma once
#include "../core/group_math.h"
#include "../core/options.h"
#include "group_table.h"

namespace dara {

struct RowSignal {
  bool scorable;
  bool keep;
};

template <int KT, typename scalar_t>
inline RowSignal row_signal(const scalar_t* row, int K, const Options& o, const double* base,
                            const GroupRef& group, double* reward_a, double* column_a) {
  if constexpr (KT > 0) K = KT;
  bool scorable = false, positive = false, negative = false;
  double rsum = 0.0;
  for (int k = 0; k < K; ++k) {
    double r = clean_reward(static_cast<double>(row[k]), o);
    bool valid = r == r;
    double a = valid ? (r - group.mean[k]) * group.scale[k] : 0.0;
    reward_a[k] = a;
    scorable |= valid;
    positive |= a > 0.0;
    negative |= a < 0.0;
    rsum += valid ? base[k] * r : 0.0;
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
