#include "device_layout.h"

#include <torch/library.h>

namespace dara {

DeviceLayout device_layout(const at::Tensor& group_index) {
  TORCH_CHECK(group_index.dim() == 1, "dara: group_index must be [N], got ", group_index.sizes());
  const int64_t n = group_index.size(0);
  auto i64 = group_index.options().dtype(at::kLong);
  auto sorted = at::sort(group_index.to(at::kLong), /*stable=*/true, /*dim=*/0, /*descending=*/false);
  at::Tensor ids = std::get<0>(sorted);
  DeviceLayout layout;
  layout.rows = std::get<1>(sorted).contiguous();
  at::Tensor starts = at::ones({n}, i64.dtype(at::kBool));
  if (n > 1) starts.slice(0, 1).copy_(ids.slice(0, 1).ne(ids.slice(0, 0, n - 1)));
  at::Tensor segment = starts.to(at::kLong).cumsum(0).sub_(1);
  layout.offsets = at::full({n + 1}, n, i64);
  layout.offsets.scatter_reduce_(0, segment, at::arange(n, i64), "amin", /*include_self=*/true);
  layout.num_groups = n > 0 ? segment.select(0, n - 1).add(1) : at::zeros({}, i64);
  return layout;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> device_layout_op(const at::Tensor& group_index) {
  DeviceLayout layout = device_layout(group_index);
  return {layout.rows, layout.offsets, layout.num_groups};
}

// ATen ops only, so one registration serves every device, CUDA included in a build without nvcc.
TORCH_LIBRARY_IMPL(dara, CompositeExplicitAutograd, m) { m.impl("device_layout", &device_layout_op); }

}  // namespace dara
