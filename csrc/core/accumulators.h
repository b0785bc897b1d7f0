// Layout of the batch accumulators: everything finalize needs, as a flat
// vector of doubles that ranks can sum with one all-reduce. K reward columns,
// C combined columns (K, or 1 for GRPO's summed column). Extremes (max r_k,
// max -r_k) live in a second vector of 2K because they reduce with MAX.
#pragma once
#include "host_device.h"

namespace dara {

struct AccumulatorLayout {
  int K;
  int C;

  DARA_HD int groups() const { return 0; }
  DARA_HD int rows() const { return 1; }          // kept, scorable responses
  DARA_HD int token_total() const { return 2; }   // sum of L_j over those rows
  DARA_HD int active(int k) const { return 3 + k; }
  DARA_HD int energy(int k) const { return 3 + K + k; }
  DARA_HD int raw_count(int k) const { return 3 + 2 * K + k; }
  DARA_HD int raw_sum(int k) const { return 3 + 3 * K + k; }
  DARA_HD int raw_sum_sq(int k) const { return 3 + 4 * K + k; }
  DARA_HD int group_weight(int k) const { return 3 + 5 * K + k; }
  DARA_HD int signal(int c) const { return 3 + 6 * K + c; }
  DARA_HD int token_signal(int c) const { return 3 + 6 * K + C + c; }
  DARA_HD int cross(int c, int d) const { return 3 + 6 * K + 2 * C + c * C + d; }
  DARA_HD int token_cross(int c, int d) const { return 3 + 6 * K + 2 * C + C * C + c * C + d; }
  DARA_HD int size() const { return 3 + 6 * K + 2 * C + 2 * C * C; }

  DARA_HD int max_reward(int k) const { return k; }
  DARA_HD int max_negated_reward(int k) const { return K + k; }
  DARA_HD int extrema_size() const { return 2 * K; }
};

}  // namespace dara
