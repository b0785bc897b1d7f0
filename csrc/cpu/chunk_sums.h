// What accumulate reads (AccumulateArgs) and what one chunk of groups adds up
// (ChunkSums): local arrays that reach the chunk's slot of the partials once,
// in the AccumulatorLayout order.
#pragma once
#include <cstdint>
#include <limits>

#include "../core/wire.h"
#include "group_layout.h"
#include "reward_count.h"

namespace dara {

struct AccumulateArgs {
  int K;
  const Options* options;
  const double* base;           // b_k
  const double* token_weights;  // L_j, or nullptr unless batch_norm is "token"
  const GroupLayout* layout;
};

template <int KT>
struct ChunkSums {
  static constexpr int N = local_size<KT>();
  double active[N] = {}, energy[N] = {}, count[N] = {}, sum[N] = {}, sum_sq[N] = {}, group_weight[N] = {};
  double signal[N] = {}, token_signal[N] = {};
  double cross[N * N] = {}, token_cross[N * N] = {};
  double max_reward[N], max_negated_reward[N];
  double groups = 0.0, rows = 0.0, token_total = 0.0;
  // A group's sum over its present entries was +-Inf or NaN: an infinite
  // reward, or a sum that overflowed. Not part of the accumulators.
  bool nonfinite = false;

  ChunkSums() {
    for (int k = 0; k < N; ++k) max_reward[k] = max_negated_reward[k] = -std::numeric_limits<double>::infinity();
  }

  void store(const AccumulatorLayout& L, double* acc, double* extrema) const {
    const int K = L.K, C = L.C;
    acc[L.groups()] = groups;
    acc[L.rows()] = rows;
    acc[L.token_total()] = token_total;
    for (int k = 0; k < K; ++k) {
      acc[L.active(k)] = active[k];
      acc[L.energy(k)] = energy[k];
      acc[L.raw_count(k)] = count[k];
      acc[L.raw_sum(k)] = sum[k];
      acc[L.raw_sum_sq(k)] = sum_sq[k];
      acc[L.group_weight(k)] = group_weight[k];
      extrema[L.max_reward(k)] = max_reward[k];
      extrema[L.max_negated_reward(k)] = max_negated_reward[k];
    }
    for (int c = 0; c < C; ++c) {
      acc[L.signal(c)] = signal[c];
      acc[L.token_signal(c)] = token_signal[c];
      for (int d = 0; d < C; ++d) {
        const int i = c <= d ? c * C + d : d * C + c;  // only the upper triangle is summed
        acc[L.cross(c, d)] = cross[i];
        acc[L.token_cross(c, d)] = token_cross[i];
      }
    }
  }
};

}  // namespace dara
