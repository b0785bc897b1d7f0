// What the bindings allocate, from the declarations generated into
// core/generated_tables.h (dara_kernels/wire.py): the op's outputs, filled by field name
// and returned in schema order (outputs_tuple), and the per-group table
// accumulate leaves for apply. Both bindings and the Triton driver allocate
// from the same declarations, so the dtypes agree on every backend.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/finalize.h"
#include "core/generated_tables.h"

namespace dara {

using AdvantageResult = OutputsOf<at::Tensor>;

inline at::ScalarType scalar_type(ElementType t) {
  switch (t) {
    case ElementType::kFloat64:
      return at::kDouble;
    case ElementType::kInt64:
      return at::kLong;
    case ElementType::kBool:
      return at::kBool;
    case ElementType::kUInt8:
      return at::kByte;
    default:
      return at::kFloat;
  }
}

// The token output [N, T] from the CPU binding's kept buffer (cpu/token_buffers.h), or at::empty.
using TokenAllocator = at::Tensor (*)(int64_t n, int64_t T);

// Every output, empty, on `device`: T is the response mask's width, or none
// without a mask (then the token output is [0]).
inline AdvantageResult empty_outputs(int64_t n, int64_t K, std::optional<int64_t> T, const at::TensorOptions& device,
                                     TokenAllocator token_output = nullptr) {
  AdvantageResult r;
  for (int field = 0; field < kNumOutputs; ++field) {
    const at::TensorOptions options = device.dtype(scalar_type(output_type(field)));
    at::Tensor& out = output_at(r, field);
    switch (output_extent(field)) {
      case Extent::kRows:
        out = at::empty({n}, options);
        break;
      case Extent::kRowsByTokens:
        out = !T.has_value() ? at::empty({0}, options)
              : token_output ? token_output(n, *T)
                             : at::empty({n, *T}, options);
        break;
      case Extent::kRewards:
        out = at::empty({K}, options);
        break;
      case Extent::kScalar:
        out = at::empty({}, options);
        break;
    }
  }
  return r;
}

// Where finalize writes its outputs; combine and shift_scale are the affine map apply reads.
inline FinalizeOutputs finalize_outputs(AdvantageResult& r, double* combine, double* shift_scale) {
  return {r.density.data_ptr<float>(),
          r.weights.data_ptr<float>(),
          r.energy.data_ptr<float>(),
          r.weighted_energy.data_ptr<float>(),
          r.active_groups.data_ptr<int64_t>(),
          r.num_groups.data_ptr<int64_t>(),
          r.informative_groups.data_ptr<int64_t>(),
          r.sum_informative_groups.data_ptr<int64_t>(),
          r.conflict_groups.data_ptr<int64_t>(),
          r.batch_mean.data_ptr<float>(),
          r.batch_std.data_ptr<float>(),
          combine,
          shift_scale};
}

template <size_t... I>
auto outputs_tuple(const AdvantageResult& r, std::index_sequence<I...>) {
  return std::make_tuple(output_at(r, I)...);
}

// The outputs in the registered schema's order.
inline auto outputs_tuple(const AdvantageResult& r) {
  return outputs_tuple(r, std::make_index_sequence<kNumOutputs>());
}

using OutputTuple = decltype(outputs_tuple(std::declval<AdvantageResult>()));

// The per-group table's arrays (they live as long as this) and the pointers the kernels take.
struct GroupTableStorage {
  std::vector<at::Tensor> arrays;
  GroupTable table;
};

inline GroupTableStorage empty_group_table(int64_t groups, int K, const Options& o, const at::TensorOptions& device) {
  GroupTableStorage s;
  for (int field = 0; field < kNumGroupFields; ++field) {
    s.arrays.push_back(
        at::empty({group_field_size(field, groups, K, o)}, device.dtype(scalar_type(group_field_type(field)))));
    set_group_field(s.table, field, s.arrays.back().data_ptr());
  }
  return s;
}

}  // namespace dara
