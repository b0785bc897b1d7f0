#include "host_call.h"

#include <optional>

#include "../core/generated_tables.h"
#include "../device_layout.h"
#include "launch.h"

namespace dara {
namespace cuda {
namespace {

DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DType::kFloat32;
    case at::kDouble:
      return DType::kFloat64;
    case at::kHalf:
      return DType::kFloat16;
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kBool:
      return DType::kBool;
    case at::kByte:
      return DType::kUInt8;
    case at::kInt:
      return DType::kInt32;
    case at::kLong:
      return DType::kInt64;
    default:
      TORCH_CHECK(false, "dara: unsupported dtype ", t);
  }
}

struct Prepared {
  CudaProblem problem;
  at::Tensor rewards, base, rows, offsets, num_groups, token_weights, bounds;
  int64_t max_groups;
};

void check(cudaError_t status) { TORCH_CHECK(status == cudaSuccess, "dara CUDA kernel: ", cudaGetErrorString(status)); }

// The kernels read every input through a raw device pointer: check_call checks each is on the rewards' device.
Prepared prepare(const Target& target, const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                 const at::Tensor& reward_weights, const OptTensor& response_mask, const OptTensor& response_lengths,
                 const OptTensor& reward_bounds, at::ArrayRef<double> options) {
  const CheckedCall call =
      check_call(target.name, rewards.device().type() == target.device, kMaxCudaRewards, rewards, group_index,
                 group_size, reward_weights, response_mask, response_lengths, reward_bounds, options);
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
  p.problem = CudaProblem{p.rewards.data_ptr(),
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
  Reduction reduction;
  int accumulate_blocks;  // one partial each
};

Launch plan(const Target& target, const Prepared& p) {
  const int K = p.problem.K, C = p.problem.C;
  const AccumulatorLayout L{K, C};
  Launch l;
  l.accumulate_blocks = grid_blocks(p.max_groups, target.multiprocessors, kAccumulateBlocksPerMultiprocessor);
  auto f64 = p.rewards.options().dtype(at::kDouble);
  l.table = empty_group_table(std::max<int64_t>(p.max_groups, 1), K, p.problem.options, p.rewards.options());
  l.partial = at::empty({l.accumulate_blocks, L.size()}, f64);
  l.partial_extrema = at::empty({l.accumulate_blocks, L.extrema_size()}, f64);
  // A memset rather than at::zeros' fill kernel: with the two kernels, the only device work of a call.
  l.counter = at::empty({1}, p.rewards.options().dtype(at::kInt));
  check(cudaMemsetAsync(l.counter.data_ptr<int>(), 0, sizeof(int), target.stream));
  l.acc = at::empty({L.size()}, f64);
  l.extrema = at::empty({L.extrema_size()}, f64);
  l.reduction = Reduction{l.partial.data_ptr<double>(),
                          l.partial_extrema.data_ptr<double>(),
                          reinterpret_cast<unsigned int*>(l.counter.data_ptr<int>()),
                          l.acc.data_ptr<double>(),
                          l.extrema.data_ptr<double>(),
                          nullptr,
                          nullptr,
                          false};
  return l;
}

}  // namespace

int multiprocessor_count(int device) {
  int count = 0;
  check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

std::tuple<at::Tensor, at::Tensor> accumulate_call(const Target& target, const at::Tensor& rewards,
                                                   const OptTensor& group_index, int64_t group_size,
                                                   const at::Tensor& reward_weights, const OptTensor& response_mask,
                                                   const OptTensor& response_lengths, at::ArrayRef<double> options) {
  Prepared p = prepare(target, rewards, group_index, group_size, reward_weights, response_mask, response_lengths,
                       std::nullopt, options);
  Launch l = plan(target, p);
  check(launch_accumulate(p.problem, l.table.table, l.reduction, Results{}, l.accumulate_blocks, target.stream));
  return {l.acc, l.extrema};
}

OutputTuple fused_advantage_call(const Target& target, const at::Tensor& rewards, const OptTensor& group_index,
                                 int64_t group_size, const at::Tensor& reward_weights, const OptTensor& response_mask,
                                 const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                 const OptTensor& accumulators, const OptTensor& extrema,
                                 at::ArrayRef<double> options) {
  Prepared p = prepare(target, rewards, group_index, group_size, reward_weights, response_mask, response_lengths,
                       reward_bounds, options);
  Launch l = plan(target, p);
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
  const Results results = finalize_outputs(r, affine.data_ptr<double>(), affine.data_ptr<double>() + p.problem.C);
  check(launch_accumulate(p.problem, l.table.table, l.reduction, results, l.accumulate_blocks, target.stream));

  const CudaApplyOutputs out{r.advantages.data_ptr<float>(),
                             r.keep.data_ptr<bool>(),
                             r.query_scale.data_ptr<float>(),
                             r.informative.data_ptr<bool>(),
                             r.sum_informative.data_ptr<bool>(),
                             mask.defined() ? r.token_advantages.data_ptr<float>() : nullptr,
                             mask.defined() ? mask.data_ptr() : nullptr,
                             mask.defined() ? dtype_of(mask.scalar_type()) : DType::kBool,
                             mask.defined() ? mask.size(1) : 0};
  const int apply_blocks = grid_blocks(p.max_groups, target.multiprocessors, kApplyBlocksPerMultiprocessor);
  check(launch_apply(p.problem, l.table.table, affine.data_ptr<double>(), out, apply_blocks, target.stream));
  return outputs_tuple(r);
}

}  // namespace cuda
}  // namespace dara
