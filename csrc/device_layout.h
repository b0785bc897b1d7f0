// A group_index as the device backends (CUDA and Triton) walk it: a stable
// sort into CSR (rows, offsets) and the group count as a device scalar, built
// with ATen ops on the index's own device and no host synchronisation, so no
// shape depends on the data. The CPU backend builds its own on the host
// (cpu/group_layout.h).
#pragma once
#include <ATen/ATen.h>

#include <tuple>

namespace dara {

struct DeviceLayout {
  at::Tensor rows;        // [N] int64: the row at each sorted position
  at::Tensor offsets;     // [N + 1] int64: where each group starts, N past the last
  at::Tensor num_groups;  // [] int64
};

DeviceLayout device_layout(const at::Tensor& group_index);

// torch.ops.dara.device_layout, which the Triton backend calls.
std::tuple<at::Tensor, at::Tensor, at::Tensor> device_layout_op(const at::Tensor& group_index);

}  // namespace dara
