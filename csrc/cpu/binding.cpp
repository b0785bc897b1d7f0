// CPU implementation of dara::fused_advantage and dara::accumulate:
// layout -> accumulate -> finalize (with the caller's all-reduced
// accumulators in distributed mode) -> apply -> token output.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "../allocation.h"
#include "../core/finalize.h"
#include "../core/generated_tables.h"
#include "../input_checks.h"
#include "accumulate.h"
#include "apply.h"
#include "group_layout.h"
#include "token_buffers.h"
#include "token_output.h"

namespace dara {
namespace {

struct CpuProblem {
  Options options;
  AccumulatorLayout L;
  GroupLayout layout;
  at::Tensor rewards, base, token_weights;  // by input row
  at::Tensor grouped, grouped_weights;      // the rewards and token weights in group order
  at::Tensor mask;                          // the response mask, contiguous, or undefined

  GroupedBatch args() const {
    return {RewardMatrix{grouped.const_data_ptr(), grouped.scalar_type() == at::kDouble, L.K}, &options,
            base.const_data_ptr<double>(),
            grouped_weights.defined() ? grouped_weights.const_data_ptr<double>() : nullptr, &layout};
  }
};

// The kernels read and write rows in group order, where each group's rows
// are contiguous: a group_index's layout copies the rewards (and token
// weights) into it, and apply's outputs back (to_input_order).
template <typename T>
at::Tensor in_group_order(const at::Tensor& t, const GroupLayout& layout) {
  if (!layout.from_group_index()) return t;
  at::Tensor out = at::empty_like(t);
  const int width = t.dim() == 2 ? static_cast<int>(t.size(1)) : 1;
  scatter_rows(t.const_data_ptr<T>(), t.size(0), width, layout.positions(), out.data_ptr<T>());
  return out;
}

// The token weights L_j: the response mask's row sums.
at::Tensor mask_row_sums_of(const at::Tensor& mask) {
  const int64_t n = mask.size(0);
  at::Tensor sums = at::empty({n}, at::kDouble);
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, mask.scalar_type(), "dara_token_weights", [&] {
    mask_row_sums(mask.const_data_ptr<scalar_t>(), n, mask.size(1), sums.data_ptr<double>());
  });
  return sums;
}

CpuProblem make_problem(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                        const at::Tensor& reward_weights, const OptTensor& response_mask,
                        const OptTensor& response_lengths, const OptTensor& reward_bounds,
                        at::ArrayRef<double> options) {
  const CheckedCall call =
      check_call("CPU", rewards.device().is_cpu(), kMaxCpuRewards, rewards, group_index, group_size, reward_weights,
                 response_mask, response_lengths, reward_bounds, options);
  const int64_t n = call.n;
  // Rows are read as float or double; narrower rewards are exactly float.
  const bool is_double = rewards.scalar_type() == at::kDouble;
  CpuProblem p{.options = call.options,
               .L = call.L,
               .rewards = rewards.to(is_double ? at::kDouble : at::kFloat).contiguous(),
               .base = reward_weights.to(at::kDouble).contiguous(),
               .mask = response_mask.has_value() ? response_mask->contiguous() : at::Tensor()};
  if (group_index.has_value()) {
    const at::Tensor ids = group_index->to(at::kLong).contiguous();
    p.layout = GroupLayout::from_ids(ids.const_data_ptr<int64_t>(), n);
  } else {
    p.layout = GroupLayout::contiguous(n, group_size);
  }
  if (p.options.batch_norm == kTokenNorm) {
    p.token_weights =
        response_mask.has_value() ? mask_row_sums_of(p.mask) : response_lengths->to(at::kDouble).contiguous();
  }
  p.grouped = is_double ? in_group_order<double>(p.rewards, p.layout) : in_group_order<float>(p.rewards, p.layout);
  if (p.token_weights.defined()) p.grouped_weights = in_group_order<double>(p.token_weights, p.layout);
  return p;
}

// accumulate counted the infinite rewards; only then are they searched, for
// the first one in input order.
void reject_inf(const at::Tensor& rewards) {
  const at::Tensor where = at::nonzero(at::isinf(rewards));
  TORCH_CHECK_VALUE(where.size(0) == 0, "rewards contains +-Inf at index (", where[0][0].item<int64_t>(), ", ",
                    where[0][1].item<int64_t>(), "); rewards must be finite or NaN");
}

std::tuple<at::Tensor, at::Tensor> accumulate_cpu(const at::Tensor& rewards, const OptTensor& group_index,
                                                  int64_t group_size, const at::Tensor& reward_weights,
                                                  const OptTensor& response_mask, const OptTensor& response_lengths,
                                                  at::ArrayRef<double> options) {
  const CpuProblem p = make_problem(rewards, group_index, group_size, reward_weights, response_mask, response_lengths,
                                    std::nullopt, options);
  GroupTableStorage table = empty_group_table(p.layout.num_groups(), p.L.K, p.options, at::kCPU);
  at::Tensor acc = at::empty({p.L.size()}, at::kDouble);
  at::Tensor extrema = at::empty({p.L.extrema_size()}, at::kDouble);
  accumulate(p.args(), p.L, table.table, acc.data_ptr<double>(), extrema.data_ptr<double>());
  return {acc, extrema};
}

OutputTuple fused_advantage_cpu(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                                const at::Tensor& reward_weights, const OptTensor& response_mask,
                                const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                const OptTensor& accumulators, const OptTensor& extrema, at::ArrayRef<double> options) {
  const CpuProblem p = make_problem(rewards, group_index, group_size, reward_weights, response_mask, response_lengths,
                                    reward_bounds, options);
  const int64_t n = rewards.size(0), K = p.L.K;
  GroupTableStorage storage = empty_group_table(p.layout.num_groups(), p.L.K, p.options, at::kCPU);
  GroupTable& table = storage.table;
  std::vector<double> local_acc(p.L.size()), local_ext(p.L.extrema_size());
  accumulate(p.args(), p.L, table, local_acc.data(), local_ext.data());
  if (p.options.reject_inf && local_acc[p.L.infinite_rewards()] > 0.0) reject_inf(p.rewards);
  // In distributed mode, the batch's accumulators (all ranks' sums) replace this rank's.
  const at::Tensor acc = given_sums(accumulators, p.L.size(), rewards, "accumulators");
  const at::Tensor ext = given_sums(extrema, p.L.extrema_size(), rewards, "extrema");
  const at::Tensor bounds = given_sums(reward_bounds, 2 * K, rewards, "reward_bounds");

  const std::optional<int64_t> T = response_mask.has_value() ? std::optional<int64_t>(p.mask.size(1)) : std::nullopt;
  AdvantageResult r = empty_outputs(n, K, T, at::kCPU, empty_token_output);
  std::vector<double> combine(p.L.C), shift_scale(2), scratch(2 * K);
  const FinalizeInputs in{acc.defined() ? acc.const_data_ptr<double>() : local_acc.data(),
                          ext.defined() ? ext.const_data_ptr<double>() : local_ext.data(),
                          p.base.const_data_ptr<double>(),
                          bounds.defined() ? bounds.const_data_ptr<double>() : nullptr};
  const FinalizeOutputs fin = finalize_outputs(r, combine.data(), shift_scale.data());
  finalize(p.options, p.L, in, fin, scratch.data());

  const CpuApplyOutputs out{r.advantages.data_ptr<float>(), r.keep.data_ptr<bool>(), r.query_scale.data_ptr<float>(),
                            r.informative.data_ptr<bool>(), r.sum_informative.data_ptr<bool>()};
  const ApplyArgs apply_args{combine.data(), shift_scale[0], shift_scale[1]};
  // Stride 2 (each row's advantage beside its query scale) makes the shuffled
  // dara call 1.08x [1.00-1.16] faster than three separate arrays (N = 2^20,
  // K = 4, G = 16, 2 threads; benchmarks/compare_builds.py).
  if (p.layout.from_group_index()) {
    const at::Tensor scores = at::empty({n, 2}, at::kFloat), flags = at::empty({3, n}, at::kBool);
    bool* flag = flags.data_ptr<bool>();
    const CpuApplyOutputs grouped{
        scores.data_ptr<float>(), flag, scores.data_ptr<float>() + 1, flag + n, flag + 2 * n, 2};
    apply(p.args(), p.L, table, apply_args, grouped);
    to_input_order(grouped, p.layout.positions(), n, out);
  } else {
    apply(p.args(), p.L, table, apply_args, out);
  }

  if (T.has_value()) {
    AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, p.mask.scalar_type(), "dara_token_output", [&] {
      write_token_advantages(r.advantages.const_data_ptr<float>(), p.mask.const_data_ptr<scalar_t>(), n, *T,
                             r.token_advantages.data_ptr<float>());
    });
  }
  return outputs_tuple(r);
}

int64_t set_token_cache_bytes(int64_t bytes) { return token_buffers().set_limit(bytes); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(dara, m) { m.def("set_token_cache_bytes(int bytes) -> int", &set_token_cache_bytes); }

TORCH_LIBRARY_IMPL(dara, CPU, m) {
  m.impl("fused_advantage", &fused_advantage_cpu);
  m.impl("accumulate", &accumulate_cpu);
}

}  // namespace dara
