// Accumulate: one pass over the groups. Each group's rows are read while in
// cache for its statistics (sections 2-3), then once more to add its rows to
// the batch accumulators (AccumulatorLayout).
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "../core/accumulators.h"
#include "../core/group_math.h"
#include "../core/options.h"
#include "chunks.h"
#include "group_layout.h"
#include "group_table.h"
#include "row_signal.h"

namespace dara {

struct AccumulateArgs {
  int K;
  const Options* options;
  const double* base;           // b_k
  const double* token_weights;  // L_j, or nullptr unless batch_norm is "token"
  const GroupLayout* layout;
};

template <typename scalar_t>
void group_statistics(const scalar_t* rewards, const AccumulateArgs& a, int64_t g, GroupTable& table,
                      const AccumulatorLayout& L, double* acc, double* extrema, double* scratch) {
  const int K = a.K;
  const Options& o = *a.options;
  const GroupLayout& layout = *a.layout;
  double* count = scratch;
  double* sum = scratch + K;
  double* dev = scratch + 2 * K;
  for (int k = 0; k < 3 * K; ++k) scratch[k] = 0.0;
  double sum_count = 0.0, sum_total = 0.0, sum_dev = 0.0;

  for (int64_t p = layout.begin(g); p < layout.end(g); ++p) {
    const scalar_t* row = rewards + layout.row(p) * K;
    double rsum = 0.0;
    bool scorable = false;
    for (int k = 0; k < K; ++k) {
      double r = clean_reward(static_cast<double>(row[k]), o);
      if (r != r) continue;
      count[k] += 1.0;
      sum[k] += r;
      acc[L.raw_sum_sq(k)] += r * r;
      extrema[L.max_reward(k)] = std::fmax(extrema[L.max_reward(k)], r);
      extrema[L.max_negated_reward(k)] = std::fmax(extrema[L.max_negated_reward(k)], -r);
      rsum += a.base[k] * r;
      scorable = true;
    }
    if (scorable) {
      sum_count += 1.0;
      sum_total += rsum;
    }
  }
  double* mean = table.mean.data() + g * K;
  for (int k = 0; k < K; ++k) mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
  const double sum_mean = sum_count > 0.0 ? sum_total / sum_count : 0.0;

  for (int64_t p = layout.begin(g); p < layout.end(g); ++p) {
    const scalar_t* row = rewards + layout.row(p) * K;
    double rsum = 0.0;
    bool scorable = false;
    for (int k = 0; k < K; ++k) {
      double r = clean_reward(static_cast<double>(row[k]), o);
      if (r != r) continue;
      dev[k] += (r - mean[k]) * (r - mean[k]);
      rsum += a.base[k] * r;
      scorable = true;
    }
    if (scorable) sum_dev += (rsum - sum_mean) * (rsum - sum_mean);
  }

  double* scale = table.scale.data() + g * K;
  double weight_total = 0.0;
  for (int k = 0; k < K; ++k) {
    ColumnStats s = finish_column(count[k], mean[k], dev[k], o);
    mean[k] = s.mean;
    scale[k] = s.scale;
    dev[k] = a.base[k] * s.std;  // reused: DVAO's unnormalised group weight
    weight_total += dev[k];
    acc[L.active(k)] += s.active ? 1.0 : 0.0;
    acc[L.raw_count(k)] += count[k];
    acc[L.raw_sum(k)] += sum[k];
  }
  if (o.group_weighted()) {
    double* weight = table.weight.data() + g * K;
    for (int k = 0; k < K; ++k) {
      weight[k] = weight_total != 0.0 ? dev[k] / weight_total : 0.0;
      acc[L.group_weight(k)] += weight[k];
    }
  }
  if (o.combined_column()) {
    ColumnStats s = finish_column(sum_count, sum_mean, sum_dev, o);
    table.sum_mean[g] = s.mean;
    table.sum_scale[g] = s.scale;
  }
  acc[L.groups()] += 1.0;
}

template <typename scalar_t>
void group_contributions(const scalar_t* rewards, const AccumulateArgs& a, int64_t g, GroupTable& table,
                         const AccumulatorLayout& L, double* acc, double* scratch) {
  const int K = a.K, C = L.C;
  const GroupLayout& layout = *a.layout;
  double* reward_a = scratch;
  double* column_a = scratch + K;
  const GroupRef group = table.ref(g);
  double kept = 0.0;
  for (int64_t p = layout.begin(g); p < layout.end(g); ++p) {
    const int64_t j = layout.row(p);
    RowSignal rs = row_signal(rewards + j * K, K, *a.options, a.base, group, reward_a, column_a);
    for (int k = 0; k < K; ++k) acc[L.energy(k)] += reward_a[k] * reward_a[k];
    if (!rs.keep) continue;
    kept += 1.0;
    if (!rs.scorable) continue;
    const double w = a.token_weights ? a.token_weights[j] : 0.0;
    acc[L.rows()] += 1.0;
    acc[L.token_total()] += w;
    for (int c = 0; c < C; ++c) {
      acc[L.signal(c)] += column_a[c];
      acc[L.token_signal(c)] += w * column_a[c];
      for (int d = 0; d < C; ++d) {
        const double cd = column_a[c] * column_a[d];
        acc[L.cross(c, d)] += cd;
        acc[L.token_cross(c, d)] += w * cd;
      }
    }
  }
  table.kappa[g] = kept / static_cast<double>(layout.end(g) - layout.begin(g));
}

// Fills `table` and writes the batch accumulators into acc / extrema.
template <typename scalar_t>
void accumulate(const scalar_t* rewards, const AccumulateArgs& a, GroupTable& table,
                const AccumulatorLayout& L, double* acc, double* extrema) {
  const int64_t groups = a.layout->num_groups();
  const int64_t chunks = num_chunks(groups);
  const int M = L.size(), E = L.extrema_size();
  const double lowest = -std::numeric_limits<double>::infinity();
  std::vector<double> partial(chunks * M, 0.0), partial_extrema(chunks * E, lowest);
  for_each_chunk(groups, [&](int64_t c, int64_t g0, int64_t g1) {
    std::vector<double> scratch(3 * a.K + L.C);
    double* acc_c = partial.data() + c * M;
    double* ext_c = partial_extrema.data() + c * E;
    for (int64_t g = g0; g < g1; ++g) {
      group_statistics(rewards, a, g, table, L, acc_c, ext_c, scratch.data());
      group_contributions(rewards, a, g, table, L, acc_c, scratch.data());
    }
  });
  for (int i = 0; i < M; ++i) acc[i] = 0.0;
  for (int i = 0; i < E; ++i) extrema[i] = lowest;
  for (int64_t c = 0; c < chunks; ++c) {
    for (int i = 0; i < M; ++i) acc[i] += partial[c * M + i];
    for (int i = 0; i < E; ++i) extrema[i] = std::fmax(extrema[i], partial_extrema[c * E + i]);
  }
}

}  // namespace dara
