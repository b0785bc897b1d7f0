// Sizes of a kernel's per-row arrays, fixed at compile time: KT rewards, or
// for KT = 0 any K up to the backend's Limit (kMax*Rewards in generated_tables.h), and
// CT combined columns, or for CT = 0 the most any mode has for Limit
// rewards (max_column_count, from wire.COLUMN_MODES).
#pragma once
#include "generated_tables.h"

namespace dara {

template <int KT, int Limit>
constexpr int max_rewards() {
  return KT > 0 ? KT : Limit;
}

template <int CT, int Limit>
constexpr int max_columns() {
  return CT > 0 ? CT : max_column_count(Limit);
}

}  // namespace dara
