// Compile-time K for the common reward counts so the per-row loops unroll and
// the per-group values stay in registers; other K up to kMaxCpuRewards use the
// generic instantiation (KT = 0).
#pragma once
#include <c10/util/Exception.h>

#include <type_traits>

#include "../core/row_signal.h"
#include "../core/wire.h"

namespace dara {

template <int KT>
constexpr int local_size() {
  return KT > 0 ? KT : kMaxCpuRewards;
}

// The per-row arithmetic type: float for float32 and narrower rewards (exact
// for them), double for float64 rewards so they keep their precision.
template <typename scalar_t>
using row_real_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// One row of rewards in the per-row real type, for the shared row formulas.
template <int KT, typename Real, typename scalar_t>
inline const Real* load_row(const scalar_t* row, int K, Real* out) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) out[k] = static_cast<Real>(row[k]);
  return out;
}

template <typename F>
void dispatch_reward_count(int K, const F& f) {
  TORCH_CHECK(K >= 1 && K <= kMaxCpuRewards, "dara: the CPU backend supports 1 to ", kMaxCpuRewards,
              " reward columns, got ", K);
  switch (K) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

// The options' column mode as a compile-time constant for row_signal.
template <typename F>
void dispatch_columns(const Options& o, const F& f) {
  if (o.combined_column()) return f(std::integral_constant<Columns, Columns::kSummed>{});
  if (o.group_weighted()) return f(std::integral_constant<Columns, Columns::kGroupWeighted>{});
  return f(std::integral_constant<Columns, Columns::kPerReward>{});
}

}  // namespace dara
