// Apply: the second and last read of the rewards, in group order. Per row,
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

struct ApplyOutputs {
  float* advantages;   // [N]
  bool* keep;          // [N]
  float* query_scale;  // [N]
};

void apply(const AccumulateArgs& a, const AccumulatorLayout& L, const GroupTable& table, const ApplyArgs& args,
           const ApplyOutputs& out);

}  // namespace dara
