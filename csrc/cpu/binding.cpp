// CPU implementation of dara::fused_advantage and dara::accumulate:
// layout -> accumulate -> finalize (with the caller's all-reduced
// accumulators in distributed mode) -> apply -> token output.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

#include "../core/finalize.h"
#include "../core/wire.h"
#include "../op_outputs.h"
#include "accumulate.h"
#include "apply.h"
#include "group_layout.h"
#include "token_buffers.h"
#include "token_output.h"

namespace dara {
namespace {

using OptTensor = std::optional<at::Tensor>;

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
                        const OptTensor& response_lengths, at::ArrayRef<double> options) {
  TORCH_CHECK(options.size() == kNumOptions, "dara: expected ", kNumOptions, " options, got ", options.size());
  TORCH_CHECK(rewards.dim() == 2 && rewards.device().is_cpu(), "dara: rewards must be a [N, K] CPU tensor");
  const int64_t n = rewards.size(0), K = rewards.size(1);
  TORCH_CHECK(K >= 1 && K <= kMaxCpuRewards, "dara: the CPU backend supports 1 to ", kMaxCpuRewards,
              " reward columns, got ", K);
  TORCH_CHECK(reward_weights.numel() == K, "dara: reward_weights must have K elements");
  if (response_mask.has_value()) {
    TORCH_CHECK(response_mask->dim() == 2 && response_mask->size(0) == n, "dara: response_mask must be [N, T]");
  }
  // Rows are read as float or double; narrower rewards are exactly float.
  const bool is_double = rewards.scalar_type() == at::kDouble;
  CpuProblem p{.options = options_from_vector(options.data()),
               .rewards = rewards.to(is_double ? at::kDouble : at::kFloat).contiguous(),
               .base = reward_weights.to(at::kDouble).contiguous(),
               .mask = response_mask.has_value() ? response_mask->contiguous() : at::Tensor()};
  p.L = AccumulatorLayout{static_cast<int>(K), p.options.combined_columns(static_cast<int>(K))};
  if (group_index.has_value()) {
    TORCH_CHECK(group_index->numel() == n, "dara: group_index must have N elements");
    const at::Tensor ids = group_index->to(at::kLong).contiguous();
    p.layout = GroupLayout::from_ids(ids.const_data_ptr<int64_t>(), n);
  } else {
    TORCH_CHECK(group_size >= 1 && n % group_size == 0, "dara: group_size must divide N");
    p.layout = GroupLayout::contiguous(n, group_size);
  }
  if (p.options.batch_norm == kTokenNorm) {
    TORCH_CHECK(response_mask.has_value() || response_lengths.has_value(),
                "dara: token batch normalisation needs response_mask or response_lengths");
    if (response_mask.has_value()) {
      p.token_weights = mask_row_sums_of(p.mask);
    } else {
      TORCH_CHECK(response_lengths->numel() == n, "dara: response_lengths must have N elements");
      p.token_weights = response_lengths->to(at::kDouble).contiguous();
    }
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
  const CpuProblem p =
      make_problem(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, options);
  GroupTable table(p.layout.num_groups(), p.L.K, p.options);
  at::Tensor acc = at::empty({p.L.size()}, at::kDouble);
  at::Tensor extrema = at::empty({p.L.extrema_size()}, at::kDouble);
  accumulate(p.args(), p.L, table, acc.data_ptr<double>(), extrema.data_ptr<double>());
  return {acc, extrema};
}

at::Tensor given(const OptTensor& t, int64_t size, const char* name) {
  if (!t.has_value()) return {};
  TORCH_CHECK(t->numel() == size, "dara: ", name, " must have ", size, " elements, got ", t->numel());
  return t->to(at::kDouble).contiguous();
}

OutputTuple fused_advantage_cpu(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                                const at::Tensor& reward_weights, const OptTensor& response_mask,
                                const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                const OptTensor& accumulators, const OptTensor& extrema, at::ArrayRef<double> options) {
  const CpuProblem p =
      make_problem(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, options);
  const int64_t n = rewards.size(0), K = p.L.K;
  GroupTable table(p.layout.num_groups(), p.L.K, p.options);
  std::vector<double> local_acc(p.L.size()), local_ext(p.L.extrema_size());
  accumulate(p.args(), p.L, table, local_acc.data(), local_ext.data());
  if (p.options.reject_inf && local_acc[p.L.infinite_rewards()] > 0.0) reject_inf(p.rewards);
  // In distributed mode, the batch's accumulators (all ranks' sums) replace this rank's.
  const at::Tensor acc = given(accumulators, p.L.size(), "accumulators");
  const at::Tensor ext = given(extrema, p.L.extrema_size(), "extrema");
  const at::Tensor bounds = given(reward_bounds, 2 * K, "reward_bounds");

  const auto f32 = at::kFloat, i64 = at::kLong;
  AdvantageResult r;
  r.density = at::empty({K}, f32);
  r.weights = at::empty({K}, f32);
  r.energy = at::empty({K}, f32);
  r.weighted_energy = at::empty({K}, f32);
  r.active_groups = at::empty({K}, i64);
  r.num_groups = at::empty({}, i64);
  r.batch_mean = at::empty({}, f32);
  r.batch_std = at::empty({}, f32);
  std::vector<double> combine(p.L.C), shift_scale(2), scratch(2 * K);
  const FinalizeInputs in{acc.defined() ? acc.const_data_ptr<double>() : local_acc.data(),
                          ext.defined() ? ext.const_data_ptr<double>() : local_ext.data(),
                          p.base.const_data_ptr<double>(),
                          bounds.defined() ? bounds.const_data_ptr<double>() : nullptr};
  const FinalizeOutputs fin{r.density.data_ptr<float>(),
                            r.weights.data_ptr<float>(),
                            r.energy.data_ptr<float>(),
                            r.weighted_energy.data_ptr<float>(),
                            r.active_groups.data_ptr<int64_t>(),
                            r.num_groups.data_ptr<int64_t>(),
                            r.batch_mean.data_ptr<float>(),
                            r.batch_std.data_ptr<float>(),
                            combine.data(),
                            shift_scale.data()};
  finalize(p.options, p.L, in, fin, scratch.data());

  r.advantages = at::empty({n}, f32);
  r.keep = at::empty({n}, at::kBool);
  r.query_scale = at::empty({n}, f32);
  const CpuApplyOutputs out{r.advantages.data_ptr<float>(), r.keep.data_ptr<bool>(), r.query_scale.data_ptr<float>()};
  const ApplyArgs apply_args{combine.data(), shift_scale[0], shift_scale[1]};
  // Stride 2 (each row's advantage beside its query scale) makes the shuffled
  // dara call 1.08x [1.00-1.16] faster than three separate arrays (N = 2^20,
  // K = 4, G = 16, 2 threads; benchmarks/compare_builds.py).
  if (p.layout.from_group_index()) {
    const at::Tensor scores = at::empty({n, 2}, f32), keep = at::empty({n}, at::kBool);
    const CpuApplyOutputs grouped{scores.data_ptr<float>(), keep.data_ptr<bool>(), scores.data_ptr<float>() + 1, 2};
    apply(p.args(), p.L, table, apply_args, grouped);
    to_input_order(grouped, p.layout.positions(), n, out);
  } else {
    apply(p.args(), p.L, table, apply_args, out);
  }

  r.token_advantages = at::empty({0}, f32);
  if (response_mask.has_value()) {
    const at::Tensor& mask = p.mask;
    const int64_t T = mask.size(1);
    r.token_advantages = empty_token_output(n, T);
    AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, mask.scalar_type(), "dara_token_output", [&] {
      write_token_advantages(r.advantages.const_data_ptr<float>(), mask.const_data_ptr<scalar_t>(), n, T,
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
