#include "accumulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "chunks.h"
#include "dispatch.h"

namespace dara {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// A chunk's batch sums over its rows.
template <int KT, int CT>
struct ChunkSums {
  static constexpr int N = cpu_rewards<KT>(), NC = cpu_columns<CT>();
  const int K, C;
  const bool token;
  double energy[N] = {};
  double signal[NC] = {}, cross[NC][NC] = {};
  double token_signal[NC] = {}, token_cross[NC][NC] = {};
  double rows = 0.0, token_total = 0.0;

  ChunkSums(int num_rewards, int columns, bool token_weights) : K(num_rewards), C(columns), token(token_weights) {}

  void add_to(const AccumulatorLayout& L, double* acc) const {
    for (int k = 0; k < K; ++k) acc[L.energy(k)] += energy[k];
    acc[L.rows()] += rows;
    for (int c = 0; c < C; ++c) {
      acc[L.signal(c)] += signal[c];
      for (int d = 0; d < C; ++d) acc[L.cross(c, d)] += cross[c][d];
    }
    if (!token) return;
    acc[L.token_total()] += token_total;
    for (int c = 0; c < C; ++c) {
      acc[L.token_signal(c)] += token_signal[c];
      for (int d = 0; d < C; ++d) acc[L.token_cross(c, d)] += token_cross[c][d];
    }
  }
};

// w y_c and w y_c y_d into a set of column sums. The whole square, not its
// upper triangle: the compiler then pairs y[0..1], y[2..3] as row_signal
// stored them, where the triangle's odd offsets made it load pairs that
// straddle two stores (a stalled store-to-load forward on every row).
template <int CT, int NC>
inline void add_columns(const double* y, int C, double w, double* signal, double (*cross)[NC]) {
  if constexpr (CT > 0) C = CT;
  for (int c = 0; c < C; ++c) {
    signal[c] += w * y[c];
    for (int d = 0; d < C; ++d) cross[c][d] += w * y[c] * y[d];
  }
}

template <int KT, typename scalar_t>
class Group {
 public:
  static constexpr int N = cpu_rewards<KT>();

  Group(const GroupedBatch& a, const AccumulatorLayout& L, const scalar_t* rewards, int64_t g)
      : a_(a),
        o_(*a.options),
        L_(L),
        rewards_(rewards),
        g_(g),
        begin_(a.layout->begin(g)),
        n_(a.layout->end(g) - begin_) {}

  // docs/spec.md#group-statistics into the table; the group's counts, raw
  // sums and bad entries into acc / extrema.
  void statistics(GroupTable& table, double* acc, double* extrema) const {
    // The weighted summed reward (GRPO's column, every method's signal test)
    // in the same two passes: its rows are the ones in cache.
    double count[N] = {}, sum[N] = {}, mean[N], row[N], dev[N] = {};
    double sum_count = 0.0, sum_total = 0.0, sum_dev = 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      add_row_sums<KT>(load(i, row), K(), o_, count, sum);
      bool scorable;
      const double rsum = row_reward_sum<KT>(row, K(), o_, a_.base, &scorable);
      sum_count += scorable ? 1.0 : 0.0;
      sum_total += scorable ? rsum : 0.0;
    }
    double entries = 0.0;
    for (int k = 0; k < K(); ++k) {
      mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
      entries += count[k];
      // Only a +-Inf reward (or an overflow) makes a sum of valid entries non-finite.
      if (!(sum[k] - sum[k] == 0.0)) acc[L_.infinite_rewards()] += infinite_entries(k);
    }
    const double missing = static_cast<double>(n_ * K()) - entries;
    const double sum_mean = sum_count > 0.0 ? sum_total / sum_count : 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      add_row_deviations<KT>(load(i, row), K(), o_, mean, dev);
      bool scorable;
      const double d = row_reward_sum<KT>(row, K(), o_, a_.base, &scorable) - sum_mean;
      sum_dev += scorable ? d * d : 0.0;
    }
    if (o_.raw_extremes()) add_raw_extremes(acc, extrema);
    double spread[N];  // b_k sigma_gk: DVAO's unnormalised group weight
    double spread_total = 0.0;
    bool any_active = false;
    for (int k = 0; k < K(); ++k) {
      const ColumnStats c = finish_column(count[k], mean[k], dev[k], o_);
      table.mean[g_ * K() + k] = c.mean;
      table.scale[g_ * K() + k] = c.scale;
      spread[k] = a_.base[k] * c.std;
      spread_total += spread[k];
      any_active |= c.active != 0.0;
      acc[L_.active(k)] += c.active;
      acc[L_.raw_count(k)] += count[k];
      acc[L_.raw_sum(k)] += sum[k];
    }
    if (o_.group_weighted()) {
      for (int k = 0; k < K(); ++k) {
        const double w = spread_total != 0.0 ? spread[k] / spread_total : 0.0;
        table.weight[g_ * K() + k] = w;
        acc[L_.group_weight(k)] += w;
      }
    }
    const ColumnStats summed = finish_column(sum_count, sum_mean, sum_dev, o_);
    if (o_.summed_reward()) {
      table.sum_mean[g_] = summed.mean;
      table.sum_scale[g_] = summed.scale;
    }
    const unsigned signal = group_signal(any_active, summed.active != 0.0, o_);
    table.signal[g_] = static_cast<uint8_t>(signal);
    add_group_signal(signal, L_, acc);
    acc[L_.missing_rewards()] += missing;
    acc[L_.groups()] += 1.0;
  }

  // Every row's A_jk and combined columns into the chunk's sums (R only
  // for the columns); the group's kappa.
  template <Columns M, int CT>
  void add_rows(GroupTable& table, ChunkSums<KT, CT>& t) const {
    constexpr int NC = cpu_columns<CT>();
    // The group's statistics in locals: the row loop's stores then cannot alias them.
    const GroupRefOf<double> stored = group_ref(table, g_, K(), o_);
    double mean[N], scale[N], weight[N];
    for (int k = 0; k < K(); ++k) {
      mean[k] = stored.mean[k];
      scale[k] = stored.scale[k];
      weight[k] = stored.weight ? stored.weight[k] : 0.0;
    }
    const GroupRefOf<double> group{mean, scale, stored.weight ? weight : nullptr, stored.sum_mean, stored.sum_scale};
    const int C = t.C;
    // A group that no_signal="zero" takes out adds no row to the batch statistics.
    const bool counted = !(table.signal[g_] & kZeroed);
    double kept = 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      double row[N], a[N], y[NC];
      const RowSignal rs = row_signal<KT, M>(load(i, row), K(), o_, a_.base, group, a, y);
      const bool in = rs.keep && rs.scorable && counted;
      kept += rs.keep ? 1.0 : 0.0;
      for (int k = 0; k < K(); ++k) t.energy[k] += a[k] * a[k];
      if (!in) continue;
      t.rows += 1.0;
      add_columns<CT, NC>(y, C, 1.0, t.signal, t.cross);
      if (!t.token) continue;
      const double w = a_.token_weights[begin_ + i];
      t.token_total += w;
      add_columns<CT, NC>(y, C, w, t.token_signal, t.token_cross);
    }
    table.kappa[g_] = kept / static_cast<double>(n_);
  }

 private:
  // A compile-time constant for a fixed KT, so the loops over rewards unroll.
  int K() const { return KT > 0 ? KT : L_.K; }

  const double* load(int64_t i, double* row) const { return load_row<KT>(rewards_, begin_ + i, K(), o_, row); }

  double infinite_entries(int k) const {
    double row[N], found = 0.0;
    for (int64_t i = 0; i < n_; ++i) found += is_infinite(load(i, row)[k]) ? 1.0 : 0.0;
    return found;
  }

  // SAW's and SA-MRPO's raw sums of squares and extremes.
  void add_raw_extremes(double* acc, double* extrema) const {
    double row[N];
    for (int64_t i = 0; i < n_; ++i) {
      load(i, row);
      for (int k = 0; k < K(); ++k) {
        const double x = clean_reward(row[k], o_);
        if (!(x == x)) continue;
        acc[L_.raw_sum_sq(k)] += x * x;
        extrema[L_.max_reward(k)] = std::fmax(extrema[L_.max_reward(k)], x);
        extrema[L_.max_negated_reward(k)] = std::fmax(extrema[L_.max_negated_reward(k)], -x);
      }
    }
  }

  const GroupedBatch& a_;
  const Options& o_;
  const AccumulatorLayout& L_;
  const scalar_t* rewards_;
  const int64_t g_, begin_, n_;
};

}  // namespace

void accumulate(const GroupedBatch& a, const AccumulatorLayout& L, GroupTable& table, double* acc, double* extrema) {
  const GroupLayout& layout = *a.layout;
  const int64_t groups = layout.num_groups();
  const int64_t chunks = num_chunks(groups, kGroupsPerChunk);
  const int S = L.size(), E = L.extrema_size();
  std::vector<double> partial(chunks * S, 0.0), partial_extrema(chunks * E, kMinusInf);
  const int64_t rows = groups > 0 ? layout.end(groups - 1) : 0;
  dispatch_rows(a.rewards, *a.options, [&](auto kt, auto mode, const auto* rewards) {
    constexpr int KT = decltype(kt)::value;
    constexpr Columns M = decltype(mode)::value;
    using scalar_t = std::remove_cv_t<std::remove_pointer_t<decltype(rewards)>>;
    constexpr int CT = column_count<KT, M>();
    for_each_chunk(groups, kGroupsPerChunk, rows * L.K * 8, [&](int64_t c, int64_t g0, int64_t g1) {
      double* chunk_acc = partial.data() + c * S;
      ChunkSums<KT, CT> sums(L.K, L.C, a.token_weights != nullptr);
      for (int64_t g = g0; g < g1; ++g) {
        const Group<KT, scalar_t> group(a, L, rewards, g);
        group.statistics(table, chunk_acc, partial_extrema.data() + c * E);
        group.template add_rows<M>(table, sums);
      }
      sums.add_to(L, chunk_acc);
    });
  });
  std::fill(acc, acc + S, 0.0);
  std::fill(extrema, extrema + E, kMinusInf);
  for (int64_t c = 0; c < chunks; ++c) {
    for (int i = 0; i < S; ++i) acc[i] += partial[c * S + i];
    for (int i = 0; i < E; ++i) extrema[i] = std::fmax(extrema[i], partial_extrema[c * E + i]);
  }
}

}  // namespace dara
