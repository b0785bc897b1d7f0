// Accumulate: one pass over the groups. `rewards` are in group order (the
// caller gathers them once for a group_index layout): position p holds input
// row layout.row(p), which is where per-row inputs and outputs live. Each group's rows are read while in
// cache for its statistics (docs/spec.md#group-statistics), then once more to add its rows to
// the batch accumulators (AccumulatorLayout). A chunk's sums live in local
// arrays and reach the chunk's slot of the partials once.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "../core/wire.h"
#include "chunks.h"
#include "group_layout.h"
#include "group_table.h"
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

// Per-group bookkeeping shared by both paths once dev (sum of squared
// deviations) is known: writes mean/scale (and DVAO weights) to the table.
template <int KT>
void finish_group(const AccumulateArgs& a, int64_t g, const double* count, const double* sum, const double* dev,
                  GroupTable& table, ChunkSums<KT>& sums) {
  const int K = KT > 0 ? KT : a.K;
  const Options& o = *a.options;
  double* mean = table.mean.data() + g * K;
  double* scale = table.scale.data() + g * K;
  double spread[local_size<KT>()];  // b_k sigma_gk: DVAO's unnormalised group weight
  double weight_total = 0.0;
  for (int k = 0; k < K; ++k) {
    const ColumnStats s = finish_column(count[k], mean[k], dev[k], o);
    mean[k] = s.mean;
    scale[k] = s.scale;
    spread[k] = a.base[k] * s.std;
    weight_total += spread[k];
    sums.active[k] += s.active ? 1.0 : 0.0;
    sums.count[k] += count[k];
    sums.sum[k] += sum[k];
  }
  if (o.group_weighted()) {
    double* weight = table.weight.data() + g * K;
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

// Zeroes the rows x cols corner of a matrix with row stride `stride`.
template <typename T>
inline void zero(T* m, int rows, int cols, int stride) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) m[r * stride + c] = T(0);
  }
}

// Rows per block of the per-row real type's partial sums before they reach
// the double group sums: float rounding over 32 terms stays below 2e-6.
constexpr int64_t kRowBlock = 32;

// Sums over rows [b0, b1) of x = row - shift and of the full square x x^T
// (row stride N), in the per-row real type.
template <int KT, typename Real, typename scalar_t>
void block_moments(const scalar_t* rewards, int K, int64_t b0, int64_t b1, const Real* shift, Real* bs, Real* bP) {
  constexpr int N = local_size<KT>();
  if constexpr (KT == 4 && std::is_same_v<Real, float> && std::is_same_v<scalar_t, float>) {
    // Four float rewards are one 16-byte vector: each row is a load, a
    // subtract and four broadcast multiply-adds (the compiler's own
    // vectorisation of the loops below shuffles lanes instead).
    typedef float v4 __attribute__((vector_size(16)));
    v4 sh, sum = {}, p0 = {}, p1 = {}, p2 = {}, p3 = {};
    std::memcpy(&sh, shift, sizeof(v4));
    for (int64_t p = b0; p < b1; ++p) {
      v4 x;
      std::memcpy(&x, rewards + p * 4, sizeof(v4));
      x -= sh;
      sum += x;
      p0 += x * x[0];
      p1 += x * x[1];
      p2 += x * x[2];
      p3 += x * x[3];
    }
    std::memcpy(bs, &sum, sizeof(v4));
    std::memcpy(bP, &p0, sizeof(v4));
    std::memcpy(bP + 4, &p1, sizeof(v4));
    std::memcpy(bP + 8, &p2, sizeof(v4));
    std::memcpy(bP + 12, &p3, sizeof(v4));
  } else {
    if constexpr (KT > 0) K = KT;
    zero(bs, 1, K, N);
    zero(bP, K, K, N);
    for (int64_t p = b0; p < b1; ++p) {
      Real x[N];
      for (int k = 0; k < K; ++k) x[k] = static_cast<Real>(rewards[p * K + k]) - shift[k];
      for (int c = 0; c < K; ++c) {
        bs[c] += x[c];
        for (int e = 0; e < K; ++e) bP[c * N + e] += x[c] * x[e];
      }
    }
  }
}

// Every entry valid and every row kept (the common case): one pass of shifted
// sums (shift = the group's first row, so no cancellation beyond the spread)
// gives the means and the deviation covariance; the row sums of a_c and
// a_c a_d are that covariance scaled by the columns' scales. Returns false,
// having written nothing, when the group holds a NaN.
template <int KT, typename scalar_t>
bool complete_group(const scalar_t* rewards, const AccumulateArgs& a, int64_t g, int64_t begin, int64_t end,
                    GroupTable& table, ChunkSums<KT>& sums) {
  using Real = row_real_t<scalar_t>;
  constexpr int N = local_size<KT>();
  const int K = KT > 0 ? KT : a.K;
  const Options& o = *a.options;
  const GroupLayout& layout = *a.layout;
  const bool combined = o.combined_column();
  const bool tokens = a.token_weights != nullptr;
  double shift[N], s[N], ts[N], P[N * N], tP[N * N];
  Real row_shift[N];
  for (int k = 0; k < K; ++k) {
    row_shift[k] = static_cast<Real>(rewards[begin * K + k]);
    shift[k] = static_cast<double>(row_shift[k]);
  }
  // Only the K x K corner is used (N is kMaxCpuRewards for the generic K).
  zero(s, 1, K, N);
  zero(ts, 1, K, N);
  zero(P, K, K, N);
  zero(tP, K, K, N);
  double tw = 0.0;
  for (int64_t b0 = begin; b0 < end; b0 += kRowBlock) {
    const int64_t b1 = std::min(end, b0 + kRowBlock);
    Real bs[N], bP[N * N];
    block_moments<KT>(rewards, K, b0, b1, row_shift, bs, bP);
    for (int c = 0; c < K; ++c) {
      s[c] += static_cast<double>(bs[c]);
      for (int e = 0; e < K; ++e) P[c * N + e] += static_cast<double>(bP[c * N + e]);
    }
    if (!a.token_weights) continue;
    Real bts[N], btP[N * N], btw = Real(0);
    zero(bts, 1, K, N);
    zero(btP, K, K, N);
    for (int64_t p = b0; p < b1; ++p) {
      const Real w = static_cast<Real>(a.token_weights[layout.row(p)]);
      Real x[N];
      for (int k = 0; k < K; ++k) x[k] = static_cast<Real>(rewards[p * K + k]) - row_shift[k];
      btw += w;
      for (int c = 0; c < K; ++c) {
        bts[c] += w * x[c];
        for (int e = 0; e < K; ++e) btP[c * N + e] += w * x[c] * x[e];
      }
    }
    tw += static_cast<double>(btw);
    for (int c = 0; c < K; ++c) {
      ts[c] += static_cast<double>(bts[c]);
      for (int e = 0; e < K; ++e) tP[c * N + e] += static_cast<double>(btP[c * N + e]);
    }
  }
  for (int k = 0; k < K; ++k) {
    if (!(s[k] == s[k])) return false;
  }
  if (o.method == kSaw || o.method == kSaMrpo) raw_extremes<KT>(rewards, a, begin, end, sums);

  const double n = static_cast<double>(end - begin);
  double* mean = table.mean.data() + g * K;
  double m[N], count[N], sum[N], dev[N], cov[N * N], tcov[N * N], tdsum[N];
  for (int c = 0; c < K; ++c) {
    m[c] = s[c] / n;
    mean[c] = shift[c] + m[c];
    count[c] = n;
    sum[c] = n * shift[c] + s[c];
    tdsum[c] = tokens ? ts[c] - tw * m[c] : 0.0;
  }
  for (int c = 0; c < K; ++c) {
    for (int e = c; e < K; ++e) {
      cov[c * N + e] = cov[e * N + c] = P[c * N + e] - s[c] * m[e];
      if (tokens) {
        tcov[c * N + e] = tcov[e * N + c] = tP[c * N + e] - m[c] * ts[e] - m[e] * ts[c] + tw * m[c] * m[e];
      }
    }
    cov[c * N + c] = std::fmax(cov[c * N + c], 0.0);
    dev[c] = cov[c * N + c];
  }
  double sum_mean = 0.0;
  for (int k = 0; k < K; ++k) sum_mean += a.base[k] * mean[k];
  finish_group<KT>(a, g, count, sum, dev, table, sums);
  const double* scale = table.scale.data() + g * K;
  for (int k = 0; k < K; ++k) sums.energy[k] += scale[k] * scale[k] * cov[k * N + k];
  sums.rows += n;
  sums.token_total += tw;
  table.kappa[g] = 1.0;
  if (combined) {
    double rsum_dev = 0.0, rsum_tdev = 0.0, rsum_tsum = 0.0;
    for (int c = 0; c < K; ++c) {
      for (int e = 0; e < K; ++e) rsum_dev += a.base[c] * a.base[e] * cov[c * N + e];
    }
    if (tokens) {
      for (int c = 0; c < K; ++c) {
        rsum_tsum += a.base[c] * tdsum[c];
        for (int e = 0; e < K; ++e) rsum_tdev += a.base[c] * a.base[e] * tcov[c * N + e];
      }
    }
    const ColumnStats st = finish_column(n, sum_mean, std::fmax(rsum_dev, 0.0), o);
    table.sum_mean[g] = st.mean;
    table.sum_scale[g] = st.scale;
    sums.cross[0] += st.scale * st.scale * rsum_dev;
    sums.token_signal[0] += st.scale * rsum_tsum;
    sums.token_cross[0] += st.scale * st.scale * rsum_tdev;
    return true;
  }
  double col[N];
  for (int k = 0; k < K; ++k) col[k] = scale[k] * (o.group_weighted() ? table.weight[g * K + k] : 1.0);
  for (int c = 0; c < K; ++c) {
    for (int e = c; e < K; ++e) sums.cross[c * K + e] += col[c] * col[e] * cov[c * N + e];
  }
  if (!tokens) return true;
  for (int c = 0; c < K; ++c) {
    sums.token_signal[c] += col[c] * tdsum[c];
    for (int e = c; e < K; ++e) sums.token_cross[c * K + e] += col[c] * col[e] * tcov[c * N + e];
  }
  return true;
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
  const bool raw_stats = o.method == kSaw || o.method == kSaMrpo;
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
  double* mean = table.mean.data() + g * K;
  for (int k = 0; k < K; ++k) mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
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
    const int64_t j = layout.row(p);
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
      const double w = a.token_weights[j];
      sums.token_total += w;
      for (int c = 0; c < C; ++c) {
        sums.token_signal[c] += w * col[c];
        for (int e = c; e < C; ++e) sums.token_cross[c * C + e] += w * col[c] * col[e];
      }
    }
  }
  table.kappa[g] = kept / static_cast<double>(end - begin);
}

template <int KT, typename scalar_t>
void accumulate_group(const scalar_t* rewards, const AccumulateArgs& a, int64_t g, GroupTable& table,
                      ChunkSums<KT>& sums) {
  const Options& o = *a.options;
  const int64_t begin = a.layout->begin(g), end = a.layout->end(g);
  const bool may_be_complete = !o.drops_conflicts() && (end - begin >= 2 || !o.singleton_verl);
  if (may_be_complete && complete_group<KT>(rewards, a, g, begin, end, table, sums)) return;
  // Groups with missing entries or dropped rows take double rows: their
  // statistics are only known after the sums, and GD2PO's drops depend on
  // the signs of A_jk, which float rounding near zero would flip.
  partial_group<KT, double>(rewards, a, g, begin, end, table, sums);
}

// Fills `table` and writes the batch accumulators into acc / extrema.
template <typename scalar_t>
void accumulate(const scalar_t* rewards, const AccumulateArgs& a, GroupTable& table, const AccumulatorLayout& L,
                double* acc, double* extrema) {
  const int64_t groups = a.layout->num_groups();
  const int64_t chunks = num_chunks(groups);
  const int64_t rows = a.layout->num_rows();
  const int64_t bytes = rows * (a.K * static_cast<int64_t>(sizeof(scalar_t)) + (a.token_weights ? 8 : 0));
  const int M = L.size(), E = L.extrema_size();
  std::vector<double> partial(chunks * M), partial_extrema(chunks * E);
  dispatch_reward_count(a.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    for_each_chunk(groups, bytes, [&](int64_t c, int64_t g0, int64_t g1) {
      auto sums = std::make_unique<ChunkSums<KT>>();
      for (int64_t g = g0; g < g1; ++g) accumulate_group<KT>(rewards, a, g, table, *sums);
      sums->store(L, partial.data() + c * M, partial_extrema.data() + c * E);
    });
  });
  for (int i = 0; i < M; ++i) acc[i] = 0.0;
  for (int i = 0; i < E; ++i) extrema[i] = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < chunks; ++c) {
    for (int i = 0; i < M; ++i) acc[i] += partial[c * M + i];
    for (int i = 0; i < E; ++i) extrema[i] = std::fmax(extrema[i], partial_extrema[c * E + i]);
  }
}

}  // namespace dara
