// Compile-time K for the common reward counts so the per-row loops unroll and
// the per-group values stay in registers; other K up to kMaxRewards use the
// generic instantiation (KT = 0).
#pragma once
#include <type_traits>

#include <c10/util/Exception.h>

namespace dara {

constexpr int kMaxRewards = 64;

template <int KT>
constexpr int local_size() { return KT > 0 ? KT : kMaxRewards; }

// Widens one row of rewards to double for the shared row formulas.
template <int KT, typename scalar_t>
inline const double* load_row(const scalar_t* row, int K, double* out) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) out[k] = static_cast<double>(row[k]);
  return out;
}

template <typename F>
void dispatch_reward_count(int K, const F& f) {
  TORCH_CHECK(K >= 1 && K <= kMaxRewards, "dara: compiled backends support 1 to ", kMaxRewards,
              " reward columns, got ", K);
  switch (K) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace dara
