// Accumulate: one pass over the groups, in fixed chunks of groups. A
// group's statistics take two passes over its rows (core/group_math.h; the
// weighted summed reward's in the same two, SAW's and SA-MRPO's raw moments
// one more), and a last
// one adds each row's combined columns (core/row_signal.h) to the batch
// accumulators (AccumulatorLayout); the rows stay in cache between them.
#pragma once
#include <cstdint>

#include "../core/generated_tables.h"
#include "dispatch.h"
#include "group_layout.h"
#include "group_table.h"

namespace dara {

struct GroupedBatch {
  RewardMatrix rewards;  // in group order
  const Options* options;
  const double* base;           // b_k
  const double* token_weights;  // L_j in group order, or nullptr unless batch_norm is "token"
  const GroupLayout* layout;
};

// Fills `table` and writes acc[L.size()] and extrema[L.extrema_size()].
void accumulate(const GroupedBatch& a, const AccumulatorLayout& L, GroupTable& table, double* acc, double* extrema);

}  // namespace dara
