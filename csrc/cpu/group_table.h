// The per-group table (GroupTable, core/generated_tables.h: what accumulate leaves for
// apply, docs/spec.md#group-statistics) as the CPU row formulas read one group.
#pragma once
#include <cstdint>

#include "../core/generated_tables.h"
#include "../core/row_signal.h"

namespace dara {

inline GroupRefOf<double> group_ref(const GroupTable& t, int64_t g, int K, const Options& o) {
  return {t.mean + g * K, t.scale + g * K, o.group_weighted() ? t.weight + g * K : nullptr,
          o.summed_reward() ? t.sum_mean[g] : 0.0, o.summed_reward() ? t.sum_scale[g] : 0.0};
}

}  // namespace dara
