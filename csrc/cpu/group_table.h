// What accumulate leaves for apply, per group: each reward's mean and scale,
// DVAO's group weights w_gk, GRPO's summed-column mean and scale, the
// GD2PO query scale kappa_g (written for groups that are not complete: a
// complete group keeps every row, so apply takes kappa = 1 without reading
// it), and whether the group is complete (every entry present, every row
// kept), which makes its advantages affine in its rewards.
// Accumulate writes every entry a method uses, so the storage is not cleared:
// it is kept per calling thread between calls, and a stream of calls neither
// clears nor page-faults megabytes of table each time.
#pragma once
#include <cstdint>

#include "../core/row_signal.h"
#include "../core/wire.h"
#include "thread_storage.h"

namespace dara {

struct GroupTable {
  int K;
  double *mean, *scale, *weight, *sum_mean, *sum_scale, *kappa;
  uint8_t* complete;

  GroupTable(int64_t num_groups, int num_rewards, const Options& o) : K(num_rewards) {
    const int64_t per_reward = num_groups * num_rewards;
    const int64_t weights = o.group_weighted() ? per_reward : 0;
    const int64_t summed = o.combined_column() ? num_groups : 0;
    mean = thread_storage<double, kTableValues>(2 * per_reward + weights + 2 * summed + num_groups);
    scale = mean + per_reward;
    weight = weights ? scale + per_reward : nullptr;
    sum_mean = summed ? scale + per_reward + weights : nullptr;
    sum_scale = summed ? sum_mean + summed : nullptr;
    kappa = scale + per_reward + weights + 2 * summed;
    complete = thread_storage<uint8_t, kTableFlags>(num_groups);
  }

  GroupRef ref(int64_t g) const {
    return {mean + g * K, scale + g * K, weight ? weight + g * K : nullptr, sum_mean ? sum_mean[g] : 0.0,
            sum_scale ? sum_scale[g] : 0.0};
  }
};

}  // namespace dara
