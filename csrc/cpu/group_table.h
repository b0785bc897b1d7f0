// What accumulate leaves for apply, per group (docs/spec.md#group-statistics):
// each reward's mean and scale, DVAO's group weights w_gk, GRPO's
// summed-column mean and scale, and the GD2PO query scale kappa_g.
#pragma once
#include <cstdint>
#include <vector>

#include "../core/row_signal.h"
#include "../core/wire.h"

namespace dara {

struct GroupTable {
  int K;
  std::vector<double> mean, scale;          // [B, K]
  std::vector<double> weight;               // [B, K] DVAO, else empty
  std::vector<double> sum_mean, sum_scale;  // [B] GRPO, else empty
  std::vector<double> kappa;                // [B]

  GroupTable(int64_t groups, int num_rewards, const Options& o)
      : K(num_rewards),
        mean(groups * num_rewards),
        scale(groups * num_rewards),
        weight(o.group_weighted() ? groups * num_rewards : 0),
        sum_mean(o.summed_reward() ? groups : 0),
        sum_scale(o.summed_reward() ? groups : 0),
        kappa(groups) {}

  GroupRefOf<double> ref(int64_t g) const {
    return {mean.data() + g * K, scale.data() + g * K, weight.empty() ? nullptr : weight.data() + g * K,
            sum_mean.empty() ? 0.0 : sum_mean[g], sum_scale.empty() ? 0.0 : sum_scale[g]};
  }
};

}  // namespace dara
