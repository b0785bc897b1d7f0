// Registers the CUDA kernels as the CUDA implementation of dara::fused_advantage
// and dara::accumulate (K limit: kMaxCudaRewards in core/wire.h, which Python
// reads from dara_kernels/wire.py before launching). Built only when torch has CUDA. Nothing here reads a
// device value on the host, so the op can be captured in a CUDA graph.
// Only c10/cuda headers: ATen/cuda/CUDAContext.h pulls in cuBLAS/cuSPARSE
// headers, which a CUDA toolkit without those libraries lacks.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "../allocation.h"
#include "../core/wire.h"
#include "../device_layout.h"
#include "../input_checks.h"
#include "launch.h"

namespace dara {
namespace {

cuda::DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return cuda::DType::kFloat32;
    case at::kDouble:
      return cuda::DType::kFloat64;
    case at::kHalf:
      return cuda::DType::kFloat16;
    case at::kBFloat16:
      return cuda::DType::kBFloat16;
    case at::kBool:
      return cuda::DType::kBool;
    case at::kByte:
      return cuda::DType::kUInt8;
    case at::kInt:
      return cuda::DType::kInt32;
    case at::kLong:
      return cuda::DType::kInt64;
    default:
      TORCH_CHECK(false, "dara: unsupported dtype ", t);
  }
}

struct Prepared {
  cuda::CudaProblem problem;
  at::Tensor rewards, base, rows, offsets, num_groups, token_weights, bounds;
  int64_t max_groups;
};

void check(cudaError_t status) { TORCH_CHECK(status == cudaSuccess, "dara CUDA kernel: ", cudaGetErrorString(status)); }

int multiprocessor_count(c10::DeviceIndex device) {
  int count = 0;
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// The kernels read every input through a raw device pointer: check_call checks each is on the rewards' device.
Prepared prepare(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                 const at::Tensor& reward_weights, const OptTensor& response_mask, const OptTensor& response_lengths,
                 const OptTensor& reward_bounds, at::ArrayRef<double> options) {
  const CheckedCall call = check_call("CUDA", rewards.is_cuda(), kMaxCudaRewards, rewards, group_index, group_size,
                                      reward_weights, response_mask, response_lengths, reward_bounds, options);
  const int64_t n = call.n;
  const Options& o = call.options;
  Prepared p;
  p.rewards = rewards.contiguous();
  p.base = reward_weights.to(at::kDouble).contiguous();
  if (group_index.has_value()) {
    DeviceLayout layout = device_layout(*group_index);
    p.rows = layout.rows;
    p.offsets = layout.offsets;
    p.num_groups = layout.num_groups;
    p.max_groups = n;
  } else {
    p.max_groups = n / group_size;
  }
  if (o.batch_norm == kTokenNorm) {
    p.token_weights = response_mask.has_value() ? response_mask->sum(1, false, at::kDouble).contiguous()
                                                : response_lengths.value().to(at::kDouble).contiguous();
  }
  if (reward_bounds.has_value()) p.bounds = reward_bounds->to(at::kDouble).contiguous();
  p.problem = cuda::CudaProblem{p.rewards.data_ptr(),
                                dtype_of(p.rewards.scalar_type()),
                                call.K,
                                call.L.C,
                                group_index.has_value() ? 0 : group_size,
                                p.rows.defined() ? p.rows.data_ptr<int64_t>() : nullptr,
                                p.offsets.defined() ? p.offsets.data_ptr<int64_t>() : nullptr,
                                p.num_groups.defined() ? p.num_groups.data_ptr<int64_t>() : nullptr,
                                group_index.has_value() ? 0 : p.max_groups,
                                p.base.data_ptr<double>(),
                                p.token_weights.defined() ? p.token_weights.data_ptr<double>() : nullptr,
                                p.bounds.defined() ? p.bounds.data_ptr<double>() : nullptr,
                                o};
  return p;
}

struct Launch {
  GroupTableStorage table;
  at::Tensor partial, partial_extrema, counter, acc, extrema;
  cuda::Reduction reduction;
  int blocks;
};

Launch plan(const Prepared& p, cudaStream_t stream) {
  const int K = p.problem.K, C = p.problem.C;
  const AccumulatorLayout L{K, C};
  Launch l;
  l.blocks = cuda::grid_blocks(p.max_groups, multiprocessor_count(p.rewards.get_device()));
  auto f64 = p.rewards.options().dtype(at::kDouble);
  l.table = empty_group_table(std::max<int64_t>(p.max_groups, 1), K, p.problem.options, p.rewards.options());
  l.partial = at::empty({l.blocks, L.size()}, f64);
  l.partial_extrema = at::empty({l.blocks, L.extrema_size()}, f64);
  // A memset rather than at::zeros' fill kernel: with the two kernels, the only device work of a call.
  l.counter = at::empty({1}, p.rewards.options().dtype(at::kInt));
  check(cudaMemsetAsync(l.counter.data_ptr<int>(), 0, sizeof(int), stream));
  l.acc = at::empty({L.size()}, f64);
  l.extrema = at::empty({L.extrema_size()}, f64);
  l.reduction = cuda::Reduction{l.partial.data_ptr<double>(),
                                l.partial_extrema.data_ptr<double>(),
                                reinterpret_cast<unsigned int*>(l.counter.data_ptr<int>()),
                                l.acc.data_ptr<double>(),
                                l.extrema.data_ptr<double>(),
                                nullptr,
                                nullptr,
                                false};
  return l;
}

std::tuple<at::Tensor, at::Tensor> accumulate_cuda(const at::Tensor& rewards, const OptTensor& group_index,
                                                   int64_t group_size, const at::Tensor& reward_weights,
                                                   const OptTensor& response_mask, const OptTensor& response_lengths,
                                                   at::ArrayRef<double> options) {
  const c10::cuda::CUDAGuard guard(rewards.device());
  Prepared p =
      prepare(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, std::nullopt, options);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  Launch l = plan(p, stream);
  check(cuda::launch_accumulate(p.problem, l.table.table, l.reduction, cuda::Results{}, l.blocks, stream));
  return {l.acc, l.extrema};
}

OutputTuple fused_advantage_cuda(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                                 const at::Tensor& reward_weights, const OptTensor& response_mask,
                                 const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                 const OptTensor& accumulators, const OptTensor& extrema,
                                 at::ArrayRef<double> options) {
  const c10::cuda::CUDAGuard guard(rewards.device());
  Prepared p = prepare(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, reward_bounds,
                       options);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  Launch l = plan(p, stream);
  const int64_t n = rewards.size(0), K = p.problem.K;
  at::Tensor mask = response_mask.has_value() ? response_mask->contiguous() : at::Tensor();
  AdvantageResult r =
      empty_outputs(n, K, mask.defined() ? std::optional<int64_t>(mask.size(1)) : std::nullopt, rewards.options());
  at::Tensor affine = at::empty({p.problem.C + 2}, rewards.options().dtype(at::kDouble));
  // All-reduced accumulators and extrema (distributed) replace the local ones in finalize.
  const AccumulatorLayout L{p.problem.K, p.problem.C};
  const at::Tensor given_acc = given_sums(accumulators, L.size(), rewards, "accumulators");
  const at::Tensor given_ext = given_sums(extrema, L.extrema_size(), rewards, "extrema");
  if (given_acc.defined()) l.reduction.given_accumulators = given_acc.data_ptr<double>();
  if (given_ext.defined()) l.reduction.given_extrema = given_ext.data_ptr<double>();
  l.reduction.finalize = true;
  const cuda::Results results = finalize_outputs(r, affine.data_ptr<double>(), affine.data_ptr<double>() + p.problem.C);
  check(cuda::launch_accumulate(p.problem, l.table.table, l.reduction, results, l.blocks, stream));

  const cuda::CudaApplyOutputs out{r.advantages.data_ptr<float>(),
                                   r.keep.data_ptr<bool>(),
                                   r.query_scale.data_ptr<float>(),
                                   r.informative.data_ptr<bool>(),
                                   r.sum_informative.data_ptr<bool>(),
                                   mask.defined() ? r.token_advantages.data_ptr<float>() : nullptr,
                                   mask.defined() ? mask.data_ptr() : nullptr,
                                   mask.defined() ? dtype_of(mask.scalar_type()) : cuda::DType::kBool,
                                   mask.defined() ? mask.size(1) : 0};
  check(cuda::launch_apply(p.problem, l.table.table, affine.data_ptr<double>(), out, l.blocks, stream));
  return outputs_tuple(r);
}

}  // namespace

TORCH_LIBRARY_IMPL(dara, CUDA, m) {
  m.impl("fused_advantage", &fused_advantage_cuda);
  m.impl("accumulate", &accumulate_cuda);
}

}  // namespace dara
