// The op's outputs as the registered schema returns them: a binding fills an
// AdvantageResult by field name and outputs_tuple() orders it (OutputField in
// core/wire.h, generated from dara_kernels/wire.py), so no binding depends on
// the order.
#pragma once
#include <ATen/ATen.h>

#include <tuple>
#include <utility>

#include "core/wire.h"

namespace dara {

using AdvantageResult = OutputsOf<at::Tensor>;

template <size_t... I>
auto outputs_tuple(const AdvantageResult& r, std::index_sequence<I...>) {
  return std::make_tuple(output_at(r, I)...);
}

inline auto outputs_tuple(const AdvantageResult& r) {
  return outputs_tuple(r, std::make_index_sequence<kNumOutputs>());
}

using OutputTuple = decltype(outputs_tuple(std::declval<AdvantageResult>()));

}  // namespace dara
