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

#include "../core/wire.h"
#include "../device_layout.h"
#include "../op_outputs.h"
#include "launch.h"

namespace dara {
namespace {

using OptTensor = std::optional<at::Tensor>;

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

// The kernels read every input through a raw device pointer.
void check_on_device(const at::Tensor& t, const at::Tensor& rewards, const char* name) {
  TORCH_CHECK(t.device() == rewards.device(), "dara: ", name, " must be on ", rewards.device(), " like rewards, got ",
              t.device());
}

int multiprocessor_count(c10::DeviceIndex device) {
  int count = 0;
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

Prepared prepare(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                 const at::Tensor& reward_weights, const OptTensor& response_mask, const OptTensor& response_lengths,
                 const OptTensor& reward_bounds, at::ArrayRef<double> options) {
  TORCH_CHECK(options.size() == kNumOptions, "dara: expected ", kNumOptions, " options, got ", options.size());
  TORCH_CHECK(rewards.dim() == 2 && rewards.is_cuda(), "dara: rewards must be a [N, K] CUDA tensor");
  const int64_t n = rewards.size(0), K = rewards.size(1);
  TORCH_CHECK(K >= 1 && K <= kMaxCudaRewards, "dara: the CUDA backend supports 1 to ", kMaxCudaRewards,
              " reward columns, got ", K);
  TORCH_CHECK(reward_weights.numel() == K, "dara: reward_weights must have K = ", K, " elements, got ",
              reward_weights.numel());
  check_on_device(reward_weights, rewards, "reward_weights");
  Prepared p;
  p.rewards = rewards.contiguous();
  p.base = reward_weights.to(at::kDouble).contiguous();
  const Options o = options_from_vector(options.data());
  if (group_index.has_value()) {
    TORCH_CHECK(group_index->numel() == n, "dara: group_index must have N elements");
    check_on_device(*group_index, rewards, "group_index");
    DeviceLayout layout = device_layout(*group_index);
    p.rows = layout.rows;
    p.offsets = layout.offsets;
    p.num_groups = layout.num_groups;
    p.max_groups = n;
  } else {
    TORCH_CHECK(group_size >= 1 && n % group_size == 0, "dara: group_size must divide N");
    p.max_groups = n / group_size;
  }
  if (response_mask.has_value()) {
    TORCH_CHECK(response_mask->dim() == 2 && response_mask->size(0) == n, "dara: response_mask must be [N, T]");
    check_on_device(*response_mask, rewards, "response_mask");
  }
  if (response_lengths.has_value()) {
    TORCH_CHECK(response_lengths->numel() == n, "dara: response_lengths must have N elements");
    check_on_device(*response_lengths, rewards, "response_lengths");
  }
  if (o.batch_norm == kTokenNorm) {
    TORCH_CHECK(response_mask.has_value() || response_lengths.has_value(),
                "dara: token batch norm needs response_mask or response_lengths");
    p.token_weights = response_mask.has_value() ? response_mask->sum(1, false, at::kDouble).contiguous()
                                                : response_lengths.value().to(at::kDouble).contiguous();
  }
  if (reward_bounds.has_value()) {
    TORCH_CHECK(reward_bounds->numel() == 2 * K, "dara: reward_bounds must be [K, 2], got ", reward_bounds->sizes());
    check_on_device(*reward_bounds, rewards, "reward_bounds");
    p.bounds = reward_bounds->to(at::kDouble).contiguous();
  }
  p.problem = cuda::CudaProblem{p.rewards.data_ptr(),
                                dtype_of(p.rewards.scalar_type()),
                                static_cast<int>(K),
                                o.combined_columns(static_cast<int>(K)),
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
  at::Tensor mean, scale, weight, sum_stats, kappa, signal, partial, partial_extrema, counter, acc, extrema;
  cuda::Table table;
  cuda::Reduction reduction;
  int blocks;
};

Launch plan(const Prepared& p, cudaStream_t stream) {
  const int K = p.problem.K, C = p.problem.C;
  const AccumulatorLayout L{K, C};
  Launch l;
  l.blocks = cuda::grid_blocks(p.max_groups, multiprocessor_count(p.rewards.get_device()));
  auto f32 = p.rewards.options().dtype(at::kFloat);
  auto f64 = p.rewards.options().dtype(at::kDouble);
  const int64_t groups = std::max<int64_t>(p.max_groups, 1);
  const Options& o = p.problem.options;
  l.mean = at::empty({groups * K}, f64);
  l.scale = at::empty({groups * K}, f64);
  l.weight = at::empty({o.group_weighted() ? groups * K : 1}, f64);
  l.sum_stats = at::empty({o.summed_reward() ? 2 * groups : 2}, f64);
  l.kappa = at::empty({groups}, f32);
  l.signal = at::empty({groups}, p.rewards.options().dtype(at::kByte));
  l.partial = at::empty({l.blocks, L.size()}, f64);
  l.partial_extrema = at::empty({l.blocks, L.extrema_size()}, f64);
  // A memset rather than at::zeros' fill kernel: with the two kernels, the only device work of a call.
  l.counter = at::empty({1}, p.rewards.options().dtype(at::kInt));
  check(cudaMemsetAsync(l.counter.data_ptr<int>(), 0, sizeof(int), stream));
  l.acc = at::empty({L.size()}, f64);
  l.extrema = at::empty({L.extrema_size()}, f64);
  l.table = cuda::Table{l.mean.data_ptr<double>(),      l.scale.data_ptr<double>(), l.weight.data_ptr<double>(),
                        l.sum_stats.data_ptr<double>(), l.kappa.data_ptr<float>(),  l.signal.data_ptr<uint8_t>()};
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
  check(cuda::launch_accumulate(p.problem, l.table, l.reduction, cuda::Results{}, l.blocks, stream));
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
  auto f32 = rewards.options().dtype(at::kFloat);
  auto i64 = rewards.options().dtype(at::kLong);
  at::Tensor density = at::empty({K}, f32), weights = at::empty({K}, f32), energy = at::empty({K}, f32);
  at::Tensor weighted_energy = at::empty({K}, f32), active = at::empty({K}, i64);
  at::Tensor num_groups = at::empty({}, i64), batch_mean = at::empty({}, f32), batch_std = at::empty({}, f32);
  at::Tensor informative_groups = at::empty({}, i64), sum_informative_groups = at::empty({}, i64);
  at::Tensor conflict_groups = at::empty({}, i64);
  at::Tensor affine = at::empty({p.problem.C + 2}, rewards.options().dtype(at::kDouble));
  // All-reduced accumulators and extrema (distributed) replace the local ones in finalize.
  const AccumulatorLayout L{p.problem.K, p.problem.C};
  at::Tensor given_acc, given_ext;
  if (accumulators.has_value()) {
    TORCH_CHECK(accumulators->numel() == L.size(), "dara: accumulators must have ", L.size(), " elements for K = ", K,
                " and this method, got ", accumulators->numel());
    check_on_device(*accumulators, rewards, "accumulators");
    given_acc = accumulators->to(at::kDouble).contiguous();
    l.reduction.given_accumulators = given_acc.data_ptr<double>();
  }
  if (extrema.has_value()) {
    TORCH_CHECK(extrema->numel() == L.extrema_size(), "dara: extrema must have ", L.extrema_size(),
                " elements for K = ", K, ", got ", extrema->numel());
    check_on_device(*extrema, rewards, "extrema");
    given_ext = extrema->to(at::kDouble).contiguous();
    l.reduction.given_extrema = given_ext.data_ptr<double>();
  }
  l.reduction.finalize = true;
  const cuda::Results results{density.data_ptr<float>(),
                              weights.data_ptr<float>(),
                              energy.data_ptr<float>(),
                              weighted_energy.data_ptr<float>(),
                              active.data_ptr<int64_t>(),
                              num_groups.data_ptr<int64_t>(),
                              informative_groups.data_ptr<int64_t>(),
                              sum_informative_groups.data_ptr<int64_t>(),
                              conflict_groups.data_ptr<int64_t>(),
                              batch_mean.data_ptr<float>(),
                              batch_std.data_ptr<float>(),
                              affine.data_ptr<double>(),
                              affine.data_ptr<double>() + p.problem.C};
  check(cuda::launch_accumulate(p.problem, l.table, l.reduction, results, l.blocks, stream));

  at::Tensor advantages = at::empty({n}, f32);
  at::Tensor keep = at::empty({n}, rewards.options().dtype(at::kBool));
  at::Tensor query_scale = at::empty({n}, f32);
  at::Tensor informative = at::empty({n}, rewards.options().dtype(at::kBool));
  at::Tensor sum_informative = at::empty({n}, rewards.options().dtype(at::kBool));
  at::Tensor token = at::empty({0}, f32), mask;
  if (response_mask.has_value()) {
    mask = response_mask->contiguous();
    token = at::empty({n, mask.size(1)}, f32);
  }
  const cuda::CudaApplyOutputs out{advantages.data_ptr<float>(),
                                   keep.data_ptr<bool>(),
                                   query_scale.data_ptr<float>(),
                                   informative.data_ptr<bool>(),
                                   sum_informative.data_ptr<bool>(),
                                   mask.defined() ? token.data_ptr<float>() : nullptr,
                                   mask.defined() ? mask.data_ptr() : nullptr,
                                   mask.defined() ? dtype_of(mask.scalar_type()) : cuda::DType::kBool,
                                   mask.defined() ? mask.size(1) : 0};
  check(cuda::launch_apply(p.problem, l.table, affine.data_ptr<double>(), out, l.blocks, stream));
  return outputs_tuple(AdvantageResult{.advantages = advantages,
                                       .token_advantages = token,
                                       .density = density,
                                       .weights = weights,
                                       .energy = energy,
                                       .weighted_energy = weighted_energy,
                                       .active_groups = active,
                                       .num_groups = num_groups,
                                       .batch_mean = batch_mean,
                                       .batch_std = batch_std,
                                       .keep = keep,
                                       .query_scale = query_scale,
                                       .informative = informative,
                                       .sum_informative = sum_informative,
                                       .informative_groups = informative_groups,
                                       .sum_informative_groups = sum_informative_groups,
                                       .conflict_groups = conflict_groups});
}

}  // namespace

TORCH_LIBRARY_IMPL(dara, CUDA, m) {
  m.impl("fused_advantage", &fused_advantage_cuda);
  m.impl("accumulate", &accumulate_cuda);
}

}  // namespace dara
