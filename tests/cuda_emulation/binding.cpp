// The emulated CUDA backend, for the tests only: dara_emulated::fused_advantage
// and dara_emulated::accumulate (the dara ops' schemas) on CPU tensors, run by
// the CUDA backend's own host code (csrc/cuda/host_call.cpp) and kernels
// (csrc/cuda/*.cu, compiled by g++ under emulated_cuda.h); the emulated
// device's settings and launch record; launch.h's launch limits; and the
// faulty kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

#include "../../csrc/core/generated_tables.h"
#include "../../csrc/cuda/host_call.h"
#include "../../csrc/cuda/launch.h"
#include "emulator.h"
#include "faulty_kernels.h"

namespace {

using dara::OptTensor;

dara::cuda::Target emulated_device() {
  return {"emulated CUDA", at::kCPU, dara::cuda::multiprocessor_count(0), nullptr};
}

// A kernel that diverges, as the RuntimeError a test can assert on.
template <typename F>
auto raising_kernel_errors(const F& call) {
  try {
    return call();
  } catch (const dara_emulation::KernelError& error) {
    TORCH_CHECK(false, error.what());
  }
}

std::tuple<at::Tensor, at::Tensor> accumulate(const at::Tensor& rewards, const OptTensor& group_index,
                                              int64_t group_size, const at::Tensor& reward_weights,
                                              const OptTensor& response_mask, const OptTensor& response_lengths,
                                              at::ArrayRef<double> options) {
  return raising_kernel_errors([&] {
    return dara::cuda::accumulate_call(emulated_device(), rewards, group_index, group_size, reward_weights,
                                       response_mask, response_lengths, options);
  });
}

dara::OutputTuple fused_advantage(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                                  const at::Tensor& reward_weights, const OptTensor& response_mask,
                                  const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                  const OptTensor& accumulators, const OptTensor& extrema,
                                  at::ArrayRef<double> options) {
  return raising_kernel_errors([&] {
    return dara::cuda::fused_advantage_call(emulated_device(), rewards, group_index, group_size, reward_weights,
                                            response_mask, response_lengths, reward_bounds, accumulators, extrema,
                                            options);
  });
}

void configure(int64_t multiprocessors, int64_t seed) {
  dara_emulation::configure(dara_emulation::Config{static_cast<int>(multiprocessors), static_cast<uint64_t>(seed)});
}

std::tuple<int64_t, int64_t, int64_t> launch_limits() {
  constexpr int K = dara::kMaxCudaRewards;
  return {dara::cuda::kAccumulateBlocksPerMultiprocessor, dara::cuda::kApplyBlocksPerMultiprocessor,
          static_cast<int64_t>(dara::cuda::accumulate_shared_bytes(K, dara::max_column_count(K)))};
}

std::tuple<std::vector<std::string>, std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>> launches() {
  std::vector<std::string> kernels;
  std::vector<int64_t> grids, blocks, shared_bytes;
  for (const dara_emulation::LaunchRecord& l : dara_emulation::launches()) {
    kernels.push_back(l.kernel);
    grids.push_back(static_cast<int64_t>(l.grid.x) * l.grid.y * l.grid.z);
    blocks.push_back(static_cast<int64_t>(l.block.x) * l.block.y * l.block.z);
    shared_bytes.push_back(static_cast<int64_t>(l.shared_bytes));
  }
  return {kernels, grids, blocks, shared_bytes};
}

at::Tensor faulty_kernel(const std::string& name) {
  at::Tensor out = at::empty({256}, at::kDouble);
  raising_kernel_errors([&] {
    dara_emulation::faulty_kernel(name, out.data_ptr<double>());
    return 0;
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(dara_emulated, m) {
  m.def(dara::kFusedAdvantageSchema);
  m.def(dara::kAccumulateSchema);
  m.def("configure(int multiprocessors, int seed) -> ()", &configure);
  m.def(
      "launch_limits() -> (int accumulate_blocks_per_multiprocessor, int apply_blocks_per_multiprocessor, "
      "int most_accumulate_shared_bytes)",
      &launch_limits);
  m.def("launches() -> (str[] kernels, int[] grids, int[] blocks, int[] shared_bytes)", &launches);
  m.def("faulty_kernel(str name) -> Tensor", &faulty_kernel);
}

TORCH_LIBRARY_IMPL(dara_emulated, CPU, m) {
  m.impl("fused_advantage", &fused_advantage);
  m.impl("accumulate", &accumulate);
}
