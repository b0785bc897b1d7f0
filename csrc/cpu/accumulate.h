// Accumulate: one pass over the groups. `rewards` are in group order (the
// caller gathers them once for a group_index layout): position p holds input
// row layout.row(p), where the token weights live (the caller builds the
// layout's rows when there are token weights). Complete
// groups go through complete_groups.h; a group with missing entries or dropped
// rows is read while in cache for its statistics (docs/spec.md#group-statistics),
// then once more to add its rows to the batch accumulators (AccumulatorLayout).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "../core/wire.h"
#include "chunk_sums.h"
#include "chunks.h"
#include "complete_groups.h"
#include "cpu_isa.h"
#include "group_layout.h"
#include "group_table.h"
#include "reward_count.h"
#include "reward_types.h"

namespace dara {

// A partial group's bookkeeping once dev (sum of squared deviations) is
// known: writes mean/scale (and DVAO weights) to the table.
template <int KT>
void finish_group(const AccumulateArgs& a, int64_t g, const double* count, const double* sum, const double* dev,
                  GroupTable& table, ChunkSums<KT>& sums) {
  const int K = KT > 0 ? KT : a.K;
  const Options& o = *a.options;
  double* mean = table.mean + g * K;
  double* scale = table.scale + g * K;
  double spread[local_size<KT>()];  // b_k sigma_gk: DVAO's unnormalised group weight
  double weight_total = 0.0;
  for (int k = 0; k < K; ++k) {
    const ColumnStats s = finish_column(count[k], mean[k], dev[k], o);
    mean[k] = s.mean;
    scale[k] = s.scale;
    spread[k] = a.base[k] * s.std;
    weight_total += spread[k];
    sums.active[k] += s.active;
    sums.count[k] += count[k];
    sums.sum[k] += sum[k];
  }
  if (o.group_weighted()) {
    double* weight = table.weight + g * K;
    for (int k = 0; k < K; ++k) {
      weight[k] = weight_total != 0.0 ? spread[k] / weight_total : 0.0;
      sums.group_weight[k] += weight[k];
    }
  }
  sums.groups += 1.0;
}

// SAW and SA-MRPO only: one row's valid entries into the batch's sum of
// squares, max and max of the negation per reward.
template <int KT, typename Real>
void add_raw_extremes(const Real* row, const AccumulateArgs& a, ChunkSums<KT>& sums) {
  const int K = KT > 0 ? KT : a.K;
  for (int k = 0; k < K; ++k) {
    const double r = static_cast<double>(clean_reward(row[k], *a.options));
    if (!(r == r)) continue;
    sums.sum_sq[k] += r * r;
    sums.max_reward[k] = std::fmax(sums.max_reward[k], r);
    sums.max_negated_reward[k] = std::fmax(sums.max_negated_reward[k], -r);
  }
}

template <int KT, typename scalar_t>
void raw_extremes(const scalar_t* rewards, const AccumulateArgs& a, int64_t begin, int64_t end, ChunkSums<KT>& sums) {
  using Real = row_real_t<scalar_t>;
  const int K = KT > 0 ? KT : a.K;
  Real row[local_size<KT>()];
  for (int64_t p = begin; p < end; ++p) add_raw_extremes<KT>(load_row<KT>(rewards + p * K, K, row), a, sums);
}

// Missing entries, unscorable rows or GD2PO's dropped rows: the group
// statistics' two passes (core/group_math.h), then a row pass through
// row_signal, in the given per-row real type with double sums.
template <int KT, typename Real, typename scalar_t>
void partial_group(const scalar_t* rewards, const AccumulateArgs& a, int64_t g, int64_t begin, int64_t end,
                   GroupTable& table, ChunkSums<KT>& sums) {
  constexpr int N = local_size<KT>();
  const int K = KT > 0 ? KT : a.K;
  const Options& o = *a.options;
  const GroupLayout& layout = *a.layout;
  const bool raw_stats = o.raw_extremes();
  Real base[N], row[N];
  for (int k = 0; k < K; ++k) base[k] = static_cast<Real>(a.base[k]);
  double count[N] = {}, sum[N] = {};
  double sum_count = 0.0, sum_total = 0.0;
  for (int64_t p = begin; p < end; ++p) {
    load_row<KT>(rewards + p * K, K, row);
    add_row_sums<KT>(row, K, o, count, sum);
    if (raw_stats) add_raw_extremes<KT>(row, a, sums);
    bool scorable;
    const double rsum = static_cast<double>(row_reward_sum<KT>(row, K, o, base, &scorable));
    sum_count += scorable ? 1.0 : 0.0;
    sum_total += scorable ? rsum : 0.0;
  }
  double* mean = table.mean + g * K;
  for (int k = 0; k < K; ++k) {
    mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
    sums.nonfinite |= !(sum[k] - sum[k] == 0.0);
  }
  const double sum_mean = sum_count > 0.0 ? sum_total / sum_count : 0.0;
  double dev[N] = {};
  double sum_dev = 0.0;
  for (int64_t p = begin; p < end; ++p) {
    load_row<KT>(rewards + p * K, K, row);
    add_row_deviations<KT>(row, K, o, mean, dev);
    bool scorable;
    const double d = static_cast<double>(row_reward_sum<KT>(row, K, o, base, &scorable)) - sum_mean;
    sum_dev += scorable ? d * d : 0.0;
  }
  finish_group<KT>(a, g, count, sum, dev, table, sums);
  if (o.combined_column()) {
    const ColumnStats s = finish_column(sum_count, sum_mean, sum_dev, o);
    table.sum_mean[g] = s.mean;
    table.sum_scale[g] = s.scale;
  }

  const int C = o.combined_column() ? 1 : K;
  const GroupRef stats = table.ref(g);
  Real group_mean[N], group_scale[N], group_weight[N];
  for (int k = 0; k < K; ++k) {
    group_mean[k] = static_cast<Real>(stats.mean[k]);
    group_scale[k] = static_cast<Real>(stats.scale[k]);
    group_weight[k] = stats.weight ? static_cast<Real>(stats.weight[k]) : Real(0);
  }
  const GroupRefOf<Real> group{group_mean, group_scale, stats.weight ? group_weight : nullptr,
                               static_cast<Real>(stats.sum_mean), static_cast<Real>(stats.sum_scale)};
  Real reward_a[N], column_a[N] = {};  // C > 1 means row_signal fills every column
  double kept = 0.0;
  for (int64_t p = begin; p < end; ++p) {
    const RowSignal rs = row_signal<KT>(load_row<KT>(rewards + p * K, K, row), K, o, base, group, reward_a, column_a);
    for (int k = 0; k < K; ++k) sums.energy[k] += static_cast<double>(reward_a[k] * reward_a[k]);
    kept += rs.keep ? 1.0 : 0.0;
    if (!(rs.keep && rs.scorable)) continue;
    sums.rows += 1.0;
    double col[N];
    for (int c = 0; c < C; ++c) col[c] = static_cast<double>(column_a[c]);
    for (int c = 0; c < C; ++c) {
      sums.signal[c] += col[c];
      for (int e = c; e < C; ++e) sums.cross[c * C + e] += col[c] * col[e];
    }
    if (a.token_weights) {
      const double w = a.token_weights[layout.row(p)];
      sums.token_total += w;
      for (int c = 0; c < C; ++c) {
        sums.token_signal[c] += w * col[c];
        for (int e = c; e < C; ++e) sums.token_cross[c * C + e] += w * col[c] * col[e];
      }
    }
  }
  table.kappa[g] = kept / static_cast<double>(end - begin);
  table.complete[g] = 0;
}

// Groups [g0, g1) of one chunk: complete groups through the batch, the
// others one at a time. Groups with missing entries or dropped rows take
// double rows: their statistics are only known after the sums, and GD2PO's
// drops depend on the signs of A_jk, which float rounding near zero would flip.
template <int KT, typename scalar_t>
void accumulate_groups(const scalar_t* rewards, const AccumulateArgs& a, int64_t g0, int64_t g1, GroupTable& table,
                       ChunkSums<KT>& sums, CompleteBatch<KT>& batch) {
  const Options& o = *a.options;
  const bool raw_stats = o.raw_extremes();
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t begin = a.layout->begin(g), end = a.layout->end(g);
    const bool may_be_complete = !o.drops_conflicts() && (end - begin >= 2 || !o.singleton_verl);
    if (may_be_complete && batch.add(rewards, a, g, begin, end)) {
      if (raw_stats) raw_extremes<KT>(rewards, a, begin, end, sums);
      if (batch.full()) batch.finish(a, table, sums);
      continue;
    }
    partial_group<KT, double>(rewards, a, g, begin, end, table, sums);
  }
  if (!batch.empty()) batch.finish(a, table, sums);
}

// Fills `table` and writes the batch accumulators into acc / extrema.
// Returns whether some group's sum was not finite (see ChunkSums::nonfinite).
template <typename scalar_t>
bool accumulate(const scalar_t* rewards, const AccumulateArgs& a, GroupTable& table, const AccumulatorLayout& L,
                double* acc, double* extrema) {
  const int64_t groups = a.layout->num_groups();
  const int64_t chunks = num_chunks(groups);
  const int64_t rows = a.layout->num_rows();
  const int64_t bytes = rows * (a.K * static_cast<int64_t>(sizeof(scalar_t)) + (a.token_weights ? 8 : 0));
  const int M = L.size(), E = L.extrema_size();
  std::vector<double> partial(chunks * M), partial_extrema(chunks * E);
  std::vector<uint8_t> nonfinite(chunks);
  dispatch_reward_count(a.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    for_each_chunk(groups, bytes, [&](int64_t c, int64_t g0, int64_t g1) {
      ChunkSums<KT>* sums = thread_storage<ChunkSums<KT>, kChunkSums>(1);
      *sums = ChunkSums<KT>();
      CompleteBatch<KT> batch(a.K, a.token_weights != nullptr);
      with_cpu_isa([&] { accumulate_groups<KT>(rewards, a, g0, g1, table, *sums, batch); });
      sums->store(L, partial.data() + c * M, partial_extrema.data() + c * E);
      nonfinite[c] = sums->nonfinite;
    });
  });
  for (int i = 0; i < M; ++i) acc[i] = 0.0;
  for (int i = 0; i < E; ++i) extrema[i] = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < chunks; ++c) {
    for (int i = 0; i < M; ++i) acc[i] += partial[c * M + i];
    for (int i = 0; i < E; ++i) extrema[i] = std::fmax(extrema[i], partial_extrema[c * E + i]);
  }
  return std::find(nonfinite.begin(), nonfinite.end(), 1) != nonfinite.end();
}

#define DARA_ACCUMULATE(T)                                                                                     \
  bool accumulate<T>(const T* rewards, const AccumulateArgs& a, GroupTable& table, const AccumulatorLayout& L, \
                     double* acc, double* extrema);
#define DARA_EXTERN_ACCUMULATE(T) extern template DARA_ACCUMULATE(T)
DARA_REWARD_TYPES(DARA_EXTERN_ACCUMULATE)
#undef DARA_EXTERN_ACCUMULATE

}  // namespace dara
