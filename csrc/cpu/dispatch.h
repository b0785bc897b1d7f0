// The per-row loops run with the reward count K and the combined-column
// count C as compile-time constants for the common K (1 to 4): the loops
// unroll and a group's sums stay in registers, 2.15x faster than the generic
// copy on dara at N = 2^20, K = 4, G = 16 (benchmarks/compare_builds.py,
// docs/architecture.md). Other K up to kMaxCpuRewards take the generic copy
// (KT = CT = 0; the binding checks K). Rows are read in their own type,
// float or double (narrower rewards are widened to float once, by the
// binding), and converted to double in registers.
#pragma once
#include <type_traits>

#include "../core/generated_tables.h"
#include "../core/row_arrays.h"
#include "../core/row_signal.h"

namespace dara {

// The rewards [N, K], float or double.
struct RewardMatrix {
  const void* data;
  bool is_double;
  int K;
};

template <Columns M>
using ColumnsConstant = std::integral_constant<Columns, M>;

// The combined-column count of a mode for KT rewards (0: not known at compile time).
template <int KT, Columns M>
constexpr int column_count() {
  return M == Columns::kRuntime || (KT == 0 && columns_follow_k(M)) ? 0 : column_count(M, KT);
}

template <int KT>
constexpr int cpu_rewards() {
  return max_rewards<KT, kMaxCpuRewards>();
}

template <int CT>
constexpr int cpu_columns() {
  return max_columns<CT, kMaxCpuRewards>();
}

// f(KT, M) for the options' combined columns.
template <typename F>
void dispatch_counts(int K, const Options& o, const F& f) {
  auto with_k = [&](auto kt) {
    switch (o.columns()) {
      case Columns::kSummed:
        return f(kt, ColumnsConstant<Columns::kSummed>{});
      case Columns::kSoftMinimum:
        return f(kt, ColumnsConstant<Columns::kSoftMinimum>{});
      case Columns::kGroupWeighted:
        return f(kt, ColumnsConstant<Columns::kGroupWeighted>{});
      case Columns::kPositiveParts:
        return f(kt, ColumnsConstant<Columns::kPositiveParts>{});
      default:
        return f(kt, ColumnsConstant<Columns::kPerReward>{});
    }
  };
  switch (K) {
    case 1:
      return with_k(std::integral_constant<int, 1>{});
    case 2:
      return with_k(std::integral_constant<int, 2>{});
    case 3:
      return with_k(std::integral_constant<int, 3>{});
    case 4:
      return with_k(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 0>{}, ColumnsConstant<Columns::kRuntime>{});
  }
}

// f(KT, M, const scalar_t* rewards).
template <typename F>
void dispatch_rows(const RewardMatrix& rewards, const Options& o, const F& f) {
  dispatch_counts(rewards.K, o, [&](auto kt, auto ct) {
    if (rewards.is_double) return f(kt, ct, static_cast<const double*>(rewards.data));
    return f(kt, ct, static_cast<const float*>(rewards.data));
  });
}

// Row j of the rewards, in doubles, with the options' reward gates applied.
template <int KT, typename scalar_t>
inline const double* load_row(const scalar_t* rewards, int64_t j, int K, const Options& o, double* out) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) out[k] = static_cast<double>(rewards[j * K + k]);
  gate_row<KT>(out, K, o);
  return out;
}

}  // namespace dara
