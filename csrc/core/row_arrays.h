// Sizes of a kernel's per-row arrays, fixed at compile time: KT rewards, or
// for KT = 0 any K up to the backend's Limit (kMax*Rewards in wire.h), and
// CT combined columns, or for CT = 0 at most K + 1 (positive calibration).
#pragma once

namespace dara {

template <int KT, int Limit>
constexpr int max_rewards() {
  return KT > 0 ? KT : Limit;
}

template <int CT, int Limit>
constexpr int max_columns() {
  return CT > 0 ? CT : Limit + 1;
}

}  // namespace dara
