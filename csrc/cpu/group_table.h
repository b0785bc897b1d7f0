// What accumulate leaves for apply, per group: each reward's mean and scale,
// DVAO's group weights w_gk, GRPO's summed-column mean and scale, and the
// GD2PO query scale kappa_g.
#pragma once
#include <cstdint>
#include <vector>

#include "../core/row_signal.h"
#include "../core/wire.h"

namespace dara {

struct GroupTable {
  int K;
  std::vector<double> mean, scale, weight, sum_mean, sum_scale, kappa;

  GroupTable(int64_t num_groups, int num_rewards, const Options& o)
      : K(num_rewards),
        mean(num_groups * num_rewards),
        scale(num_groups * num_rewards),
        weight(o.group_weighted() ? num_groups * num_rewards : 0),
        sum_mean(o.combined_column() ? num_groups : 0),
        sum_scale(o.combined_column() ? num_groups : 0),
        kappa(num_groups) {}

  GroupRef ref(int64_t g) const {
    return {mean.data() + g * K, scale.data() + g * K, weight.empty() ? nullptr : weight.data() + g * K,
            sum_mean.empty() ? 0.0 : sum_mean[g], sum_scale.empty() ? 0.0 : sum_scale[g]};
  }
};

}  // namespace dara
