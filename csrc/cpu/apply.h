// Apply: the second and last read of the rewards (in group order, see
// accumulate.h, or in input order for a shuffled layout's affine groups);
// writes each response's advantage, keep flag and query scale once. Each
// row goes through the shared row formulas (core/row_signal.h) in the
// per-row real type, with K and C known at compile time so they unroll.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../core/row_signal.h"
#include "../core/wire.h"
#include "chunks.h"
#include "cpu_isa.h"
#include "group_layout.h"
#include "group_table.h"
#include "reward_count.h"
#include "reward_types.h"
#include "thread_storage.h"

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

// Float rows lose up to |mean| * 2^-24 to the rounding of the group mean
// (and of c_k r_jk, of the same size, in AffineEntry's folded form). While
// |mean| is within this many of the column's 1 / scale (its spread), the
// advantages stay within about 2.5e-6 of the double values (the CPU
// tolerance is 1e-5; tests/test_cpu_backend.py::test_float_rows_near_their_offset_limit);
// a group with a larger offset runs its rows in double.
constexpr double kFloatMeanPerSpread = 16.0;

inline bool float_rows_suffice(const GroupRef& g, int K, bool summed) {
  bool ok = !summed || std::fabs(g.sum_mean) * g.sum_scale <= kFloatMeanPerSpread;
  for (int k = 0; k < K; ++k) ok &= std::fabs(g.mean[k]) * g.scale[k] <= kFloatMeanPerSpread;
  return ok;
}

template <int KT, Columns M, typename Real, typename scalar_t>
void apply_group(const scalar_t* rewards, const ApplyArgs& a, const Options& o, const GroupRef& stats, double kappa,
                 int64_t begin, int64_t end, float* advantages, bool* keep, float* query_scale) {
  constexpr int N = local_size<KT>();
  const int K = KT > 0 ? KT : a.K;
  constexpr int CT = M == Columns::kSummed ? 1 : KT;
  const int C = CT > 0 ? CT : a.C;
  const GroupLayout& layout = *a.layout;
  Real base[N], combine[N], mean[N], scale[N], weight[N];
  for (int k = 0; k < K; ++k) {
    base[k] = static_cast<Real>(a.base[k]);
    mean[k] = static_cast<Real>(stats.mean[k]);
    scale[k] = static_cast<Real>(stats.scale[k]);
    weight[k] = stats.weight ? static_cast<Real>(stats.weight[k]) : Real(0);
  }
  for (int c = 0; c < C; ++c) combine[c] = static_cast<Real>(a.combine[c]);
  const GroupRefOf<Real> group{mean, scale, stats.weight ? weight : nullptr, static_cast<Real>(stats.sum_mean),
                               static_cast<Real>(stats.sum_scale)};
  const Real shift = static_cast<Real>(a.shift);
  const Real factor = static_cast<Real>((o.apply_query_scale ? kappa : 1.0) * a.scale);
  const float q = static_cast<float>(kappa);
  if (!layout.sorted()) {
    // Rows in place: the compiler runs this loop across rows in SIMD lanes.
    for (int64_t p = begin; p < end; ++p) {
      Real row[N], reward_a[N], column_a[N] = {};  // C > 1 means row_signal fills every column
      const RowSignal rs =
          row_signal<KT, Real, M>(load_row<KT>(rewards + p * K, K, row), K, o, base, group, reward_a, column_a);
      advantages[p] = static_cast<float>(row_advantage<CT>(rs, column_a, C, combine, shift, factor));
      keep[p] = rs.keep;
      query_scale[p] = q;
    }
    return;
  }
  for (int64_t p = begin; p < end; ++p) {
    Real row[N], reward_a[N], column_a[N] = {};
    const RowSignal rs =
        row_signal<KT, Real, M>(load_row<KT>(rewards + p * K, K, row), K, o, base, group, reward_a, column_a);
    const int64_t j = layout.row(p);
    advantages[j] = static_cast<float>(row_advantage<CT>(rs, column_a, C, combine, shift, factor));
    keep[j] = rs.keep;
    query_scale[j] = q;
  }
}

// A complete group's advantages are affine in its rewards:
// s_j = sum_k c_k (r_jk - mu_gk), where c_k folds the column's combine
// coefficient, DVAO's w_gk or GRPO's b_k into the scale. A row is then one
// multiply-add per reward with no flags, and the loop over rows runs in SIMD lanes.
template <int KT, Columns M>
void complete_coefficients(const ApplyArgs& a, const GroupRef& stats, double* coef) {
  const int K = KT > 0 ? KT : a.K;
  for (int k = 0; k < K; ++k) {
    if constexpr (M == Columns::kSummed) {
      coef[k] = a.combine[0] * a.base[k] * stats.sum_scale;
    } else if constexpr (M == Columns::kGroupWeighted) {
      coef[k] = a.combine[k] * stats.weight[k] * stats.scale[k];
    } else {
      coef[k] = a.combine[k] * stats.scale[k];
    }
  }
}

// A complete group's row formula s_j as an entry of Real values. In float
// (rows whose group passed float_rows_suffice), K coefficients and the
// offset sum_k c_k mu_gk: s_j = sum_k c_k r_jk - offset. The mean's offset
// costs at most kFloatMeanPerSpread float roundings of the spread, and the
// entry stays small (20 bytes at K = 4), so a shuffled layout's table of
// them stays in the L2 cache. In double, K coefficients and the K means:
// s_j = sum_k c_k (r_jk - mu_gk), exact for any offset from the mean.
template <typename Real>
struct AffineEntry {
  static constexpr bool kFolded = std::is_same_v<Real, float>;
  static int width(int K) { return kFolded ? K + 1 : 2 * K; }

  static void fill(const double* coef, const double* mean, int K, Real* entry) {
    double offset = 0.0;
    for (int k = 0; k < K; ++k) {
      entry[k] = static_cast<Real>(coef[k]);
      if constexpr (kFolded) {
        offset += coef[k] * mean[k];
      } else {
        entry[K + k] = static_cast<Real>(mean[k]);
      }
    }
    if constexpr (kFolded) entry[K] = static_cast<Real>(offset);
  }

  template <int KT, typename scalar_t>
  static Real signal(const Real* entry, const scalar_t* row, int K) {
    if constexpr (KT > 0) K = KT;
    Real s = Real(0);
    if constexpr (kFolded) {
      for (int k = 0; k < K; ++k) s += entry[k] * static_cast<Real>(row[k]);
      return s - entry[K];
    } else {
      for (int k = 0; k < K; ++k) s += entry[k] * (static_cast<Real>(row[k]) - entry[K + k]);
      return s;
    }
  }
};

template <int KT, typename Real, typename scalar_t>
void apply_complete_group(const scalar_t* rewards, const ApplyArgs& a, const GroupRef& stats, const double* coef,
                          int64_t begin, int64_t end, float* advantages, bool* keep, float* query_scale) {
  using Entry = AffineEntry<Real>;
  const int K = KT > 0 ? KT : a.K;
  Real entry[2 * local_size<KT>()];
  Entry::fill(coef, stats.mean, K, entry);
  const Real shift = static_cast<Real>(a.shift), factor = static_cast<Real>(a.scale);
  const GroupLayout& layout = *a.layout;
  if (!layout.sorted()) {
    // keep and query_scale were filled for the whole chunk (apply_groups).
    for (int64_t p = begin; p < end; ++p) {
      advantages[p] = static_cast<float>((Entry::template signal<KT>(entry, rewards + p * K, K) - shift) * factor);
    }
    return;
  }
  for (int64_t p = begin; p < end; ++p) {
    const int64_t j = layout.row(p);
    advantages[j] = static_cast<float>((Entry::template signal<KT>(entry, rewards + p * K, K) - shift) * factor);
    keep[j] = true;
    query_scale[j] = 1.0f;
  }
}

// Whether a group's rows can run in the per-row real type.
template <Columns M, typename Real>
bool real_rows_suffice(const ApplyArgs& a, const GroupRef& stats) {
  return std::is_same_v<Real, double> || float_rows_suffice(stats, a.K, M == Columns::kSummed);
}

// A complete group whose rows can run in the per-row real type: its rows
// are affine (apply_complete_group) in that type.
template <Columns M, typename Real>
bool affine_group(const ApplyArgs& a, const GroupTable& table, int64_t g) {
  return table.complete[g] && real_rows_suffice<M, Real>(a, table.ref(g));
}

// Groups [g0, g1) in group order; with skip_affine, only the groups a pass in
// input order (apply_rows_in_input_order) does not cover.
template <int KT, Columns M, typename Real, typename scalar_t>
void apply_groups(const scalar_t* rewards, const ApplyArgs& a, const GroupTable& table, int64_t g0, int64_t g1,
                  bool skip_affine, float* advantages, bool* keep, float* query_scale) {
  const Options o = *a.options;  // a local copy: the output stores cannot alias it
  if (!a.layout->sorted() && g0 < g1) {
    // A complete group keeps every row at query scale 1. Filled for the whole
    // chunk at once (a fill per group of a few rows does not run in SIMD
    // lanes); the other groups' rows overwrite it below.
    const int64_t begin = a.layout->begin(g0), end = a.layout->end(g1 - 1);
    std::fill(keep + begin, keep + end, true);
    std::fill(query_scale + begin, query_scale + end, 1.0f);
  }
  for (int64_t g = g0; g < g1; ++g) {
    const GroupRef stats = table.ref(g);
    const bool real_rows = real_rows_suffice<M, Real>(a, stats);
    const bool affine = table.complete[g] && real_rows;  // as affine_group
    if (skip_affine && affine) continue;
    const int64_t begin = a.layout->begin(g), end = a.layout->end(g);
    if (table.complete[g]) {
      double coef[local_size<KT>()];
      complete_coefficients<KT, M>(a, stats, coef);
      if (affine) {
        apply_complete_group<KT, Real>(rewards, a, stats, coef, begin, end, advantages, keep, query_scale);
      } else {
        apply_complete_group<KT, double>(rewards, a, stats, coef, begin, end, advantages, keep, query_scale);
      }
    } else if (real_rows) {
      apply_group<KT, M, Real>(rewards, a, o, stats, table.kappa[g], begin, end, advantages, keep, query_scale);
    } else {
      apply_group<KT, M, double>(rewards, a, o, stats, table.kappa[g], begin, end, advantages, keep, query_scale);
    }
  }
}

// A shuffled layout's affine groups as a table of AffineEntry, one per key
// (see GroupLayout::row_keys; zeros for keys of no group or of a group that
// is not affine, whose rows apply_groups rewrites). Returns how many
// groups are affine.
template <int KT, Columns M, typename Real>
int64_t affine_table(const ApplyArgs& a, const GroupTable& table, int64_t key0, int64_t key1, Real* entries) {
  constexpr int N = local_size<KT>();
  const int K = KT > 0 ? KT : a.K;
  const int width = AffineEntry<Real>::width(K);
  int64_t affine = 0;
  for (int64_t key = key0; key < key1; ++key) {
    Real* entry = entries + key * width;
    const int64_t g = a.layout->group_of_key(key);
    if (g < 0 || !affine_group<M, Real>(a, table, g)) {
      std::fill(entry, entry + width, Real(0));
      continue;
    }
    const GroupRef stats = table.ref(g);
    double coef[N];
    complete_coefficients<KT, M>(a, stats, coef);
    AffineEntry<Real>::fill(coef, stats.mean, K, entry);
    ++affine;
  }
  return affine;
}

// How many rows ahead the input-order pass fetches table entries.
constexpr int64_t kTablePrefetchRows = 32;

// Input rows [j0, j1) in input order, each from its key's table entry: the
// same arithmetic as apply_complete_group, with sequential writes instead of
// a scatter. Rows of groups that are not affine get values apply_groups replaces.
template <int KT, typename Real, typename scalar_t>
void apply_rows_in_input_order(const scalar_t* rewards, const ApplyArgs& a, const Real* entries, int64_t j0, int64_t j1,
                               float* advantages, bool* keep, float* query_scale) {
  const int K = KT > 0 ? KT : a.K;
  const int width = AffineEntry<Real>::width(K);
  const int64_t* keys = a.layout->row_keys();
  const int64_t base = a.layout->key_base();
  const Real shift = static_cast<Real>(a.shift), factor = static_cast<Real>(a.scale);
  for (int64_t j = j0; j < j1; ++j) {
    // Tens of thousands of groups' entries outgrow the L1 cache: fetch a
    // later row's entry while this one computes.
    if (j + kTablePrefetchRows < j1) __builtin_prefetch(entries + (keys[j + kTablePrefetchRows] - base) * width);
    const Real s = AffineEntry<Real>::template signal<KT>(entries + (keys[j] - base) * width, rewards + j * K, K);
    advantages[j] = static_cast<float>((s - shift) * factor);
  }
  std::fill(keep + j0, keep + j1, true);
  std::fill(query_scale + j0, query_scale + j1, 1.0f);
}

// Rows per chunk of the input-order pass.
constexpr int64_t kApplyRowsPerChunk = 16384;

// rewards: in group order; input_rewards: the same rows in input order.
template <typename Real, typename scalar_t>
void apply_in(const scalar_t* rewards, const scalar_t* input_rewards, const ApplyArgs& a, const GroupTable& table,
              float* advantages, bool* keep, float* query_scale) {
  const int64_t n = a.layout->num_rows(), groups = a.layout->num_groups();
  const int64_t bytes = n * (a.K * static_cast<int64_t>(sizeof(scalar_t)) + 9);
  dispatch_reward_count(a.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    auto run = [&](auto mode) {
      constexpr Columns M = decltype(mode)::value;
      auto in_group_order = [&](bool skip_affine) {
        a.layout->ensure_rows();
        for_each_chunk(groups, bytes, [&](int64_t, int64_t g0, int64_t g1) {
          with_cpu_isa([&] {
            apply_groups<KT, M, Real>(rewards, a, table, g0, g1, skip_affine, advantages, keep, query_scale);
          });
        });
      };
      if (!a.layout->sorted()) return in_group_order(false);
      // A shuffled layout: rows of affine groups in input order, the rest in group order.
      const int64_t keys = a.layout->num_keys();
      const int64_t width = AffineEntry<Real>::width(a.K);
      Real* entries = thread_storage<Real, kAffineTable>(keys * width);
      std::vector<int64_t> affine(num_chunks(keys), 0);
      for_each_chunk(keys, keys * width * static_cast<int64_t>(sizeof(Real)), [&](int64_t c, int64_t k0, int64_t k1) {
        affine[c] = affine_table<KT, M, Real>(a, table, k0, k1, entries);
      });
      const int64_t affine_groups = std::accumulate(affine.begin(), affine.end(), int64_t{0});
      // Mostly non-affine groups: an input-order pass would write most rows twice.
      if (2 * affine_groups < groups) return in_group_order(false);
      const int64_t row_bytes = n * (a.K * static_cast<int64_t>(sizeof(scalar_t)) + 8 + 9);
      for_each_chunk(
          n, row_bytes,
          [&](int64_t, int64_t j0, int64_t j1) {
            with_cpu_isa([&] {
              apply_rows_in_input_order<KT, Real>(input_rewards, a, entries, j0, j1, advantages, keep, query_scale);
            });
          },
          kApplyRowsPerChunk);
      if (affine_groups < groups) in_group_order(true);
    };
    dispatch_columns(*a.options, run);
  });
}

template <typename scalar_t>
void apply(const scalar_t* rewards, const scalar_t* input_rewards, const ApplyArgs& a, const GroupTable& table,
           float* advantages, bool* keep, float* query_scale) {
  // GD2PO's keep flag depends on the signs of A_jk: kept in double (accumulate.h).
  if (a.options->drops_conflicts()) {
    apply_in<double>(rewards, input_rewards, a, table, advantages, keep, query_scale);
  } else {
    apply_in<row_real_t<scalar_t>>(rewards, input_rewards, a, table, advantages, keep, query_scale);
  }
}

#define DARA_APPLY(T)                                                                                  \
  void apply<T>(const T* rewards, const T* input_rewards, const ApplyArgs& a, const GroupTable& table, \
                float* advantages, bool* keep, float* query_scale);
#define DARA_EXTERN_APPLY(T) extern template DARA_APPLY(T)
DARA_REWARD_TYPES(DARA_EXTERN_APPLY)
#undef DARA_EXTERN_APPLY

}  // namespace dara
