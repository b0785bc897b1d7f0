// Apply: the last read of the rewards, in group order. Per row,
// the core row formulas (core/row_signal.h) with its group's statistics and
// the batch's affine map write the advantage, keep flag and query scale
// (docs/spec.md#batch-normalisation, #query-scale).
#pragma once
#include <cstdint>

#include "accumulate.h"

namespace dara {

struct ApplyArgs {
  const double* combine;  // [C] coefficients of the combined columns in s_j
  double shift;           // Ahat = (s - shift) * scale
  double scale;
};

// Row j's advantage is advantages[j * stride], its query scale
// query_scale[j * stride] and its flag keep[j].
struct CpuApplyOutputs {
  float* advantages;
  bool* keep;
  float* query_scale;
  int64_t stride = 1;
};

void apply(const GroupedBatch& a, const AccumulatorLayout& L, const GroupTable& table, const ApplyArgs& args,
           const CpuApplyOutputs& out);

// A group_index's outputs in input order: out[j] = grouped[positions[j]].
// Apply writes them in group order with stride 2, each row's advantage and
// query scale side by side: one random read fetches both.
void to_input_order(const CpuApplyOutputs& grouped, const int64_t* positions, int64_t n, const CpuApplyOutputs& out);

}  // namespace dara
