// Registers the CUDA kernels as the CUDA implementation of dara::fused_advantage
// and dara::accumulate (K limit: kMaxCudaRewards in core/generated_tables.h, which Python
// reads from dara_kernels/wire.py before launching). Built only when torch has CUDA. Nothing here reads a
// device value on the host, so the op can be captured in a CUDA graph.
// Only c10/cuda headers: ATen/cuda/CUDAContext.h pulls in cuBLAS/cuSPARSE
// headers, which a CUDA toolkit without those libraries lacks.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "host_call.h"

namespace dara {
namespace {

// The rewards' device and its current stream; the guard makes that device current for the call.
cuda::Target rewards_device(const at::Tensor& rewards) {
  return {"CUDA", at::kCUDA, cuda::multiprocessor_count(rewards.get_device()), c10::cuda::getCurrentCUDAStream()};
}

std::tuple<at::Tensor, at::Tensor> accumulate_cuda(const at::Tensor& rewards, const OptTensor& group_index,
                                                   int64_t group_size, const at::Tensor& reward_weights,
                                                   const OptTensor& response_mask, const OptTensor& response_lengths,
                                                   at::ArrayRef<double> options) {
  const c10::cuda::CUDAGuard guard(rewards.device());
  return cuda::accumulate_call(rewards_device(rewards), rewards, group_index, group_size, reward_weights, response_mask,
                               response_lengths, options);
}

OutputTuple fused_advantage_cuda(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                                 const at::Tensor& reward_weights, const OptTensor& response_mask,
                                 const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                 const OptTensor& accumulators, const OptTensor& extrema,
                                 at::ArrayRef<double> options) {
  const c10::cuda::CUDAGuard guard(rewards.device());
  return cuda::fused_advantage_call(rewards_device(rewards), rewards, group_index, group_size, reward_weights,
                                    response_mask, response_lengths, reward_bounds, accumulators, extrema, options);
}

}  // namespace

TORCH_LIBRARY_IMPL(dara, CUDA, m) {
  m.impl("fused_advantage", &fused_advantage_cuda);
  m.impl("accumulate", &accumulate_cuda);
}

}  // namespace dara
