// Apply: the second and last read of the rewards (in group order, see
// accumulate.h); writes each response's
// advantage, keep flag and query scale once.
#pragma once
#include "../core/wire.h"
#include "chunks.h"
#include "group_layout.h"
#include "group_table.h"
#include "reward_count.h"
#include "../core/row_signal.h"

namespace dara {

struct ApplyArgs {
  int K;
  int C;
  const Options* options;
  const double* base;
  const double* combine;  // [C] from finalize
  double shift;
  double scale;
  const GroupLayout* layout;
};

template <int KT, typename scalar_t>
void apply_chunk(const scalar_t* rewards, const ApplyArgs& a, const GroupTable& table, int64_t g0, int64_t g1,
                 float* advantages, bool* keep, float* query_scale) {
  constexpr int N = local_size<KT>();
  const int K = KT > 0 ? KT : a.K;
  const int C = a.C;
  const Options& o = *a.options;
  const GroupLayout& layout = *a.layout;
  for (int64_t g = g0; g < g1; ++g) {
    const GroupRef group = table.ref(g);
    const double kappa = table.kappa[g];
    const double factor = (o.apply_query_scale ? kappa : 1.0) * a.scale;
    const int64_t begin = layout.begin(g), end = layout.end(g);
    if (o.drops_conflicts()) {
      double reward_a[N], column_a[N], row_values[N];
      for (int64_t p = begin; p < end; ++p) {
        const int64_t j = layout.row(p);
        const RowSignal rs = row_signal<KT>(load_row<KT>(rewards + p * K, K, row_values), K, o, a.base, group,
                                            reward_a, column_a);
        double s = 0.0;
        for (int c = 0; c < C; ++c) s += a.combine[c] * column_a[c];
        advantages[j] = static_cast<float>((rs.keep && rs.scorable) ? (s - a.shift) * factor : 0.0);
        keep[j] = rs.keep;
        query_scale[j] = static_cast<float>(kappa);
      }
      continue;
    }
    // Every row is kept: s_j is an affine function of the valid rewards.
    double coef[N];
    for (int k = 0; k < K; ++k) {
      coef[k] = a.combine[o.combined_column() ? 0 : k] * group.scale[k] * (group.weight ? group.weight[k] : 1.0);
    }
    const double sum_coef = o.combined_column() ? a.combine[0] * group.sum_scale : 0.0;
    if (table.complete[g] && !layout.sorted()) {
      // No missing entry and rows in place: a branch-free loop the compiler vectorises.
      double offset = 0.0;
      for (int k = 0; k < K; ++k) {
        if (o.combined_column()) coef[k] = sum_coef * a.base[k];
        offset += o.combined_column() ? 0.0 : coef[k] * group.mean[k];
      }
      if (o.combined_column()) offset = sum_coef * group.sum_mean;
      const double base_value = -(offset + a.shift);
#pragma omp simd
      for (int64_t p = begin; p < end; ++p) {
        double s = base_value;
        for (int k = 0; k < K; ++k) s += coef[k] * static_cast<double>(rewards[p * K + k]);
        advantages[p] = static_cast<float>(s * factor);
        keep[p] = true;
        query_scale[p] = static_cast<float>(kappa);
      }
      continue;
    }
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j = layout.row(p);
      const scalar_t* row = rewards + p * K;
      double s = 0.0, rsum = 0.0;
      bool scorable = false;
      for (int k = 0; k < K; ++k) {
        const double r = clean_reward(static_cast<double>(row[k]), o);
        const bool valid = r == r;
        s += valid ? coef[k] * (r - group.mean[k]) : 0.0;
        rsum += valid ? a.base[k] * r : 0.0;
        scorable |= valid;
      }
      if (o.combined_column()) s = sum_coef * (rsum - group.sum_mean);
      advantages[j] = static_cast<float>(scorable ? (s - a.shift) * factor : 0.0);
      keep[j] = true;
      query_scale[j] = static_cast<float>(kappa);
    }
  }
}

template <typename scalar_t>
void apply(const scalar_t* rewards, const ApplyArgs& a, const GroupTable& table, float* advantages,
           bool* keep, float* query_scale) {
  dispatch_reward_count(a.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    for_each_chunk(a.layout->num_groups(), [&](int64_t, int64_t g0, int64_t g1) {
      apply_chunk<KT>(rewards, a, table, g0, g1, advantages, keep, query_scale);
    });
  });
}

}  // namespace dara
