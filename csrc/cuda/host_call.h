// The torch-facing half of the CUDA backend: input checks, group layout,
// allocation and the two launches, for a device given by its multiprocessor
// count and stream. Shared by the CUDA binding (binding.cpp: device guard,
// current stream, the dara::* registrations) and the tests' CPU emulation
// (tests/cuda_emulation), so that the emulation runs this code too; no c10/cuda
// header, since the emulation has no CUDA torch.
#pragma once
#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <tuple>

#include "../allocation.h"
#include "../input_checks.h"

namespace dara {
namespace cuda {

struct Target {
  const char* name;       // the backend in error messages ("CUDA")
  at::DeviceType device;  // where the inputs must be
  int multiprocessors;    // sizes both launches' grids (grid_blocks)
  cudaStream_t stream;
};

int multiprocessor_count(int device);

std::tuple<at::Tensor, at::Tensor> accumulate_call(const Target& target, const at::Tensor& rewards,
                                                   const OptTensor& group_index, int64_t group_size,
                                                   const at::Tensor& reward_weights, const OptTensor& response_mask,
                                                   const OptTensor& response_lengths, at::ArrayRef<double> options);

OutputTuple fused_advantage_call(const Target& target, const at::Tensor& rewards, const OptTensor& group_index,
                                 int64_t group_size, const at::Tensor& reward_weights, const OptTensor& response_mask,
                                 const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                 const OptTensor& accumulators, const OptTensor& extrema, at::ArrayRef<double> options);

}  // namespace cuda
}  // namespace dara
