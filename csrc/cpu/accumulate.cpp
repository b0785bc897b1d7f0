#include "accumulate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "chunks.h"
#include "reward_count.h"

namespace dara {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Rows are added in blocks of kLanes, each row to its own lane of the sums
// (row i of a group to lane i % kLanes), and a chunk's lanes are added in
// one fixed order at its end: the sums then run in SIMD lanes (a single
// running sum per value could not), which halves the row pass's time.
constexpr int kLanes = 4;

template <int KT, int CT>
struct LaneSums {
  static constexpr int N = max_rewards<KT>(), NC = CT > 0 ? CT : kMaxCpuRewards + 1;
  const int K, C;
  const bool token;
  double energy[N][kLanes];
  double signal[NC][kLanes], cross[NC][NC][kLanes];  // upper triangles
  double token_signal[NC][kLanes], token_cross[NC][NC][kLanes];
  double rows[kLanes], token_total[kLanes];

  LaneSums(int num_rewards, int columns, bool token_weights) : K(num_rewards), C(columns), token(token_weights) {
    zero(energy, K);
    zero(signal, C);
    zero(token_signal, C);
    for (int c = 0; c < C; ++c) {
      zero(cross[c], C);
      zero(token_cross[c], C);
    }
    zero(&rows, 1);
    zero(&token_total, 1);
  }

  static void zero(double (*v)[kLanes], int n) {
    for (int i = 0; i < n; ++i) {
      for (int l = 0; l < kLanes; ++l) v[i][l] = 0.0;
    }
  }

  static double lanes(const double (&v)[kLanes]) { return (v[0] + v[1]) + (v[2] + v[3]); }

  void add_to(const AccumulatorLayout& L, double* acc) const {
    for (int k = 0; k < K; ++k) acc[L.energy(k)] += lanes(energy[k]);
    acc[L.rows()] += lanes(rows);
    for (int c = 0; c < C; ++c) {
      acc[L.signal(c)] += lanes(signal[c]);
      for (int d = c; d < C; ++d) acc[L.cross(c, d)] += lanes(cross[c][d]);
    }
    if (!token) return;
    acc[L.token_total()] += lanes(token_total);
    for (int c = 0; c < C; ++c) {
      acc[L.token_signal(c)] += lanes(token_signal[c]);
      for (int d = c; d < C; ++d) acc[L.token_cross(c, d)] += lanes(token_cross[c][d]);
    }
  }
};

template <int KT, typename scalar_t>
class Group {
 public:
  static constexpr int N = max_rewards<KT>();

  Group(const AccumulateArgs& a, const AccumulatorLayout& L, const scalar_t* rewards, int64_t g)
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
    double count[N], sum[N] = {}, mean[N], row[N];
    // Plain sums first: they are all finite exactly when no entry is NaN or
    // +-Inf (or their sum overflows), and then every entry counts.
    for (int64_t i = 0; i < n_; ++i) {
      load(i, row);
      for (int k = 0; k < K(); ++k) sum[k] += row[k];
    }
    bool finite = true;
    for (int k = 0; k < K(); ++k) finite &= sum[k] - sum[k] == 0.0;
    for (int k = 0; k < K(); ++k) count[k] = static_cast<double>(n_);
    if (!finite) {
      for (int k = 0; k < K(); ++k) count[k] = sum[k] = 0.0;
      for (int64_t i = 0; i < n_; ++i) add_row_sums<KT>(load(i, row), K(), o_, count, sum);
    }
    double entries = 0.0;
    for (int k = 0; k < K(); ++k) {
      mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
      entries += count[k];
      // Only a +-Inf reward (or an overflow) makes a sum of valid entries non-finite.
      if (!(sum[k] - sum[k] == 0.0)) acc[L_.infinite_rewards()] += infinite_entries(k);
    }
    const double missing = static_cast<double>(n_ * K()) - entries;
    // read_entry: every entry present (none NaN, even under nan_policy "zero") and every row kept.
    const bool complete = finite && !o_.drops_conflicts();
    table.complete[g_] = complete;
    double dev[N] = {};
    if (complete) {
      deviations<true>(mean, dev);
    } else {
      deviations<false>(mean, dev);
    }
    if (o_.raw_extremes()) add_raw_extremes(acc, extrema);
    double spread[N];  // b_k sigma_gk: DVAO's unnormalised group weight
    double spread_total = 0.0;
    for (int k = 0; k < K(); ++k) {
      const ColumnStats c = finish_column(count[k], mean[k], dev[k], o_);
      table.mean[g_ * K() + k] = c.mean;
      table.scale[g_ * K() + k] = c.scale;
      spread[k] = a_.base[k] * c.std;
      spread_total += spread[k];
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
    if (o_.combined_column()) summed_statistics(table);
    acc[L_.missing_rewards()] += missing;
    acc[L_.groups()] += 1.0;
  }

  // Every row's A_jk and combined columns into the chunk's lane sums (R
  // only for the columns); the group's kappa.
  template <Columns M, bool Complete, int CT>
  void add_rows(GroupTable& table, LaneSums<KT, CT>& t) const {
    // The group's statistics in locals: the row loop's stores then cannot alias them.
    const GroupRefOf<double> stored = table.ref(g_);
    double mean[N], scale[N], weight[N];
    for (int k = 0; k < K(); ++k) {
      mean[k] = stored.mean[k];
      scale[k] = stored.scale[k];
      weight[k] = stored.weight ? stored.weight[k] : 0.0;
    }
    const GroupRefOf<double> group{mean, scale, stored.weight ? weight : nullptr, stored.sum_mean, stored.sum_scale};
    double kept = 0.0;
    int64_t i0 = 0;
    for (; i0 + kLanes <= n_; i0 += kLanes) kept += add_block<M, Complete, true>(group, i0, t);
    if (i0 < n_) kept += add_block<M, Complete, false>(group, i0, t);
    table.kappa[g_] = kept / static_cast<double>(n_);
  }

 private:
  // Rows i0 .. i0 + kLanes - 1, row i0 + l in lane l; a lane past the
  // group's end (Full: there is none) adds zeros. Returns the kept rows.
  template <Columns M, bool Complete, bool Full, int CT>
  double add_block(const GroupRefOf<double>& group, int64_t i0, LaneSums<KT, CT>& t) const {
    constexpr int NC = CT > 0 ? CT : kMaxCpuRewards + 1;
    const int C = t.C;
    double a[N][kLanes], y[NC][kLanes], in_r[kLanes], kept[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      double row[N], reward_a[N], column_a[NC];
      const bool here = Full || i0 + l < n_;
      const RowSignal rs =
          here ? row_signal<KT, Complete, M>(load(i0 + l, row), K(), o_, a_.base, group, reward_a, column_a)
               : RowSignal{false, false};
      const bool in = Complete ? here : rs.keep && rs.scorable;
      in_r[l] = in ? 1.0 : 0.0;
      kept[l] = (Complete ? here : rs.keep) ? 1.0 : 0.0;
      for (int k = 0; k < K(); ++k) a[k][l] = here ? reward_a[k] : 0.0;
      for (int c = 0; c < C; ++c) y[c][l] = in ? column_a[c] : 0.0;
    }
    for (int k = 0; k < K(); ++k) {
      for (int l = 0; l < kLanes; ++l) t.energy[k][l] += a[k][l] * a[k][l];
    }
    for (int l = 0; l < kLanes; ++l) t.rows[l] += in_r[l];
    for (int c = 0; c < C; ++c) {
      for (int l = 0; l < kLanes; ++l) t.signal[c][l] += y[c][l];
      for (int d = c; d < C; ++d) {
        for (int l = 0; l < kLanes; ++l) t.cross[c][d][l] += y[c][l] * y[d][l];
      }
    }
    const double block_kept = (kept[0] + kept[1]) + (kept[2] + kept[3]);
    if (!t.token) return block_kept;
    double w[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      w[l] = in_r[l] != 0.0 ? a_.token_weights[a_.layout->row(begin_ + i0 + l)] : 0.0;
      t.token_total[l] += w[l];
    }
    for (int c = 0; c < C; ++c) {
      for (int l = 0; l < kLanes; ++l) t.token_signal[c][l] += w[l] * y[c][l];
      for (int d = c; d < C; ++d) {
        for (int l = 0; l < kLanes; ++l) t.token_cross[c][d][l] += w[l] * y[c][l] * y[d][l];
      }
    }
    return block_kept;
  }

  // A compile-time constant for a fixed KT, so the loops over rewards unroll.
  int K() const { return KT > 0 ? KT : L_.K; }

  const double* load(int64_t i, double* row) const { return load_row<KT>(rewards_, begin_ + i, K(), row); }

  template <bool Complete>
  void deviations(const double* mean, double* dev) const {
    double row[N];
    for (int64_t i = 0; i < n_; ++i) add_row_deviations<KT, Complete>(load(i, row), K(), o_, mean, dev);
  }

  // GRPO: the statistics of the summed column sum_k b_k r_jk.
  void summed_statistics(GroupTable& table) const {
    double row[N], count = 0.0, total = 0.0, dev = 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      bool scorable;
      const double rsum = row_reward_sum<KT>(load(i, row), K(), o_, a_.base, &scorable);
      count += scorable ? 1.0 : 0.0;
      total += scorable ? rsum : 0.0;
    }
    const double mean = count > 0.0 ? total / count : 0.0;
    for (int64_t i = 0; i < n_; ++i) {
      bool scorable;
      const double d = row_reward_sum<KT>(load(i, row), K(), o_, a_.base, &scorable) - mean;
      dev += scorable ? d * d : 0.0;
    }
    const ColumnStats c = finish_column(count, mean, dev, o_);
    table.sum_mean[g_] = c.mean;
    table.sum_scale[g_] = c.scale;
  }

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

  const AccumulateArgs& a_;
  const Options& o_;
  const AccumulatorLayout& L_;
  const scalar_t* rewards_;
  const int64_t g_, begin_, n_;
};

}  // namespace

void accumulate(const AccumulateArgs& a, const AccumulatorLayout& L, GroupTable& table, double* acc, double* extrema) {
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
      LaneSums<KT, CT> sums(L.K, L.C, a.token_weights != nullptr);
      for (int64_t g = g0; g < g1; ++g) {
        const Group<KT, scalar_t> group(a, L, rewards, g);
        group.statistics(table, chunk_acc, partial_extrema.data() + c * E);
        if (table.complete[g]) {
          group.template add_rows<M, true>(table, sums);
        } else {
          group.template add_rows<M, false>(table, sums);
        }
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
  // The rows summed the upper triangles; the wire format holds whole matrices.
  for (int c = 0; c < L.C; ++c) {
    for (int d = 0; d < c; ++d) {
      acc[L.cross(c, d)] = acc[L.cross(d, c)];
      acc[L.token_cross(c, d)] = acc[L.token_cross(d, c)];
    }
  }
}

}  // namespace dara
