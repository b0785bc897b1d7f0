// The op's 12 outputs, placed by field (OutputField in core/wire.h, generated
// from dara_kernels/wire.py) so that no binding depends on their order.
#pragma once
#include <ATen/ATen.h>

#include <array>
#include <tuple>
#include <utility>

#include "core/wire.h"

namespace dara {

using Outputs = std::array<at::Tensor, kNumOutputs>;

template <size_t... I>
auto outputs_tuple(const Outputs& o, std::index_sequence<I...>) {
  return std::make_tuple(o[I]...);
}

inline auto outputs_tuple(const Outputs& o) { return outputs_tuple(o, std::make_index_sequence<kNumOutputs>()); }

using OutputTuple = decltype(outputs_tuple(std::declval<Outputs>()));

}  // namespace dara
