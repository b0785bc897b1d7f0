// CPU implementation of dara::fused_advantage and dara::accumulate:
// accumulate -> (optional all-reduced accumulators) -> finalize -> apply.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../core/finalize.h"
#include "../core/wire.h"
#include "../op_outputs.h"
#include "accumulate.h"
#include "apply.h"
#include "group_all_reduce.h"
#include "group_layout.h"
#include "group_table.h"
#include "large_outputs.h"
#include "new_tensor.h"
#include "thread_storage.h"
#include "token_mask.h"

namespace dara {
namespace {

using OptTensor = std::optional<at::Tensor>;

struct Problem {
  Options options;
  AccumulatorLayout L;
  at::Tensor ids;  // group_index as int64: a dense layout keys its rows by them
  GroupLayout layout;
  at::Tensor rewards;        // in group order: gathered for a group_index layout
  at::Tensor input_rewards;  // in input order
  at::Tensor base;
  at::Tensor token_weights;          // undefined unless batch_norm is "token"
  std::vector<int64_t> mask_prefix;  // from the token-weight pass over the mask, else empty
};

Problem make_problem(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                     const at::Tensor& reward_weights, const OptTensor& response_mask,
                     const OptTensor& response_lengths, at::ArrayRef<double> options) {
  TORCH_CHECK(options.size() == kNumOptions, "dara: expected ", kNumOptions, " options, got ", options.size());
  TORCH_CHECK(rewards.dim() == 2, "dara: rewards must be [N, K]");
  TORCH_CHECK(rewards.device().is_cpu(), "dara: the CPU kernel needs CPU tensors");
  const int64_t n = rewards.size(0), K = rewards.size(1);
  TORCH_CHECK(K >= 1, "dara: rewards need at least one column");
  TORCH_CHECK(reward_weights.numel() == K, "dara: reward_weights must have K elements");
  Problem p{.options = options_from_vector(options.data()),
            .rewards = rewards.contiguous(),
            .base = reward_weights.to(at::kDouble).contiguous()};
  p.input_rewards = p.rewards;
  p.L = AccumulatorLayout{static_cast<int>(K), p.options.combined_column() ? 1 : static_cast<int>(K)};
  if (group_index.has_value()) {
    TORCH_CHECK(group_index->numel() == n, "dara: group_index must have N elements");
    p.ids = group_index->to(at::kLong).contiguous();
    // The rewards in group order live only during this call: scratch kept per
    // thread (thread_storage.h), so a stream of calls neither maps nor
    // page-faults a copy of the rewards each time.
    const int64_t bytes = p.rewards.numel() * static_cast<int64_t>(p.rewards.element_size());
    at::Tensor gathered = at::from_blob(thread_storage<double, kGroupOrderRewards>((bytes + 7) / 8), p.rewards.sizes(),
                                        p.rewards.options());
    p.layout = GroupLayout::from_ids(
        p.ids.data_ptr<int64_t>(), n,
        RowCopy{static_cast<const char*>(p.rewards.const_data_ptr()),
                K * static_cast<int64_t>(p.rewards.element_size()), static_cast<char*>(gathered.data_ptr())});
    p.rewards = gathered;
  } else {
    TORCH_CHECK(group_size >= 1 && n % group_size == 0, "dara: group_size must divide N");
    p.layout = GroupLayout::contiguous(n, group_size);
  }
  if (p.options.batch_norm == kTokenNorm) {
    if (response_mask.has_value()) {
      TORCH_CHECK(response_mask->dim() == 2 && response_mask->size(0) == n, "dara: response_mask must be [N, T]");
      const at::Tensor mask = response_mask->contiguous();
      p.token_weights = new_tensor({n}, at::kDouble);
      p.mask_prefix.resize(n);
      AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, mask.scalar_type(), "dara_token_weights", [&] {
        mask_row_sums(mask.data_ptr<scalar_t>(), n, mask.size(1), p.token_weights.data_ptr<double>(),
                      p.mask_prefix.data());
      });
    } else {
      TORCH_CHECK(response_lengths.has_value() && response_lengths->numel() == n,
                  "dara: token batch normalisation needs response_mask or response_lengths");
      p.token_weights = response_lengths->to(at::kDouble).contiguous();
    }
  }
  return p;
}

AccumulateArgs accumulate_args(const Problem& p) {
  return {p.L.K, &p.options, p.base.data_ptr<double>(),
          p.token_weights.defined() ? p.token_weights.data_ptr<double>() : nullptr, &p.layout};
}

// Returns whether some group's sum was not finite.
bool run_accumulate(const Problem& p, GroupTable& table, double* acc, double* extrema) {
  if (p.token_weights.defined()) p.layout.ensure_rows();
  bool nonfinite = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.rewards.scalar_type(), "dara_accumulate", [&] {
    nonfinite = accumulate(p.rewards.data_ptr<scalar_t>(), accumulate_args(p), table, p.L, acc, extrema);
  });
  return nonfinite;
}

// Accumulate's sums pass through every reward, so an infinite one shows as a
// group sum that is not finite; only then are the rewards searched, for the
// first one in input order (a sum can also overflow with finite rewards).
void reject_inf(const at::Tensor& input_rewards) {
  const at::Tensor where = at::nonzero(at::isinf(input_rewards));
  TORCH_CHECK_VALUE(where.size(0) == 0, "rewards contains +-Inf at index (", where[0][0].item<int64_t>(), ", ",
                    where[0][1].item<int64_t>(), "); rewards must be finite or NaN");
}

std::tuple<at::Tensor, at::Tensor> accumulate_cpu(const at::Tensor& rewards, const OptTensor& group_index,
                                                  int64_t group_size, const at::Tensor& reward_weights,
                                                  const OptTensor& response_mask, const OptTensor& response_lengths,
                                                  at::ArrayRef<double> options) {
  Problem p = make_problem(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, options);
  GroupTable table(p.layout.num_groups(), p.L.K, p.options);
  at::Tensor acc = new_tensor({p.L.size()}, at::kDouble);
  at::Tensor extrema = new_tensor({p.L.extrema_size()}, at::kDouble);
  run_accumulate(p, table, acc.data_ptr<double>(), extrema.data_ptr<double>());
  return {acc, extrema};
}

OutputTuple fused_advantage_cpu(const at::Tensor& rewards, const OptTensor& group_index, int64_t group_size,
                                const at::Tensor& reward_weights, const OptTensor& response_mask,
                                const OptTensor& response_lengths, const OptTensor& reward_bounds,
                                const OptTensor& accumulators, const OptTensor& extrema, at::ArrayRef<double> options,
                                std::optional<c10::string_view> group_name) {
  TORCH_CHECK(!(group_name.has_value() && (accumulators.has_value() || extrema.has_value())),
              "dara: give group_name (reduce here) or accumulators and extrema (reduced elsewhere), not both");
  Problem p = make_problem(rewards, group_index, group_size, reward_weights, response_mask, response_lengths, options);
  const int64_t n = rewards.size(0), K = p.L.K;
  GroupTable table(p.layout.num_groups(), p.L.K, p.options);
  // This rank's accumulators, in plain vectors: tensors only where the
  // collectives need them (a small batch pays for every tensor it makes).
  std::vector<double> local_acc(p.L.size()), local_ext(p.L.extrema_size());
  if (run_accumulate(p, table, local_acc.data(), local_ext.data()) && p.options.reject_inf) {
    reject_inf(p.input_rewards);
  }
  at::Tensor acc, ext;  // the batch's, when they are not this rank's alone
  if (group_name.has_value()) {
    const std::string name(*group_name);
    acc = group_all_reduce(at::from_blob(local_acc.data(), {p.L.size()}, at::kDouble), "sum", name);
    if (p.options.raw_extremes() && !reward_bounds.has_value()) {
      ext = group_all_reduce(at::from_blob(local_ext.data(), {p.L.extrema_size()}, at::kDouble), "max", name);
    }
  }
  if (accumulators.has_value()) {
    TORCH_CHECK(accumulators->numel() == p.L.size(), "dara: accumulators must have ", p.L.size(), " elements");
    acc = accumulators->to(at::kDouble).contiguous();
  }
  if (extrema.has_value()) {
    TORCH_CHECK(extrema->numel() == p.L.extrema_size(), "dara: extrema must have ", p.L.extrema_size(), " elements");
    ext = extrema->to(at::kDouble).contiguous();
  }
  at::Tensor bounds;
  if (reward_bounds.has_value()) {
    TORCH_CHECK(reward_bounds->numel() == 2 * K, "dara: reward_bounds must be [K, 2]");
    bounds = reward_bounds->to(at::kDouble).contiguous();
  }

  const auto f32 = at::kFloat, i64 = at::kLong;
  at::Tensor density = new_tensor({K}, f32), weights = new_tensor({K}, f32), energy = new_tensor({K}, f32);
  at::Tensor weighted_energy = new_tensor({K}, f32), active = new_tensor({K}, i64);
  at::Tensor num_groups = new_tensor({}, i64), batch_mean = new_tensor({}, f32), batch_std = new_tensor({}, f32);
  std::vector<double> combine(p.L.C), shift_scale(2), scratch(2 * K);
  FinalizeInputs fin{acc.defined() ? acc.data_ptr<double>() : local_acc.data(),
                     ext.defined() ? ext.data_ptr<double>() : local_ext.data(), p.base.data_ptr<double>(),
                     bounds.defined() ? bounds.data_ptr<double>() : nullptr};
  FinalizeOutputs fout{density.data_ptr<float>(),
                       weights.data_ptr<float>(),
                       energy.data_ptr<float>(),
                       weighted_energy.data_ptr<float>(),
                       active.data_ptr<int64_t>(),
                       num_groups.data_ptr<int64_t>(),
                       batch_mean.data_ptr<float>(),
                       batch_std.data_ptr<float>(),
                       combine.data(),
                       shift_scale.data()};
  finalize(p.options, p.L, fin, fout, scratch.data());

  at::Tensor advantages = new_tensor({n}, f32);
  at::Tensor keep = new_tensor({n}, at::kBool);
  at::Tensor query_scale = new_tensor({n}, f32);
  ApplyArgs args{p.L.K,          p.L.C,          &p.options,     p.base.data_ptr<double>(),
                 combine.data(), shift_scale[0], shift_scale[1], &p.layout};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.rewards.scalar_type(), "dara_apply", [&] {
    apply(p.rewards.data_ptr<scalar_t>(), p.input_rewards.data_ptr<scalar_t>(), args, table,
          advantages.data_ptr<float>(), keep.data_ptr<bool>(), query_scale.data_ptr<float>());
  });

  at::Tensor token_advantages = new_tensor({0}, f32);
  if (response_mask.has_value()) {
    TORCH_CHECK(response_mask->dim() == 2 && response_mask->size(0) == n, "dara: response_mask must be [N, T]");
    const at::Tensor mask = response_mask->contiguous();
    const int64_t T = mask.size(1);
    token_advantages = empty_large_output({n, T}, f32);
    AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16, mask.scalar_type(), "dara_token_output", [&] {
      write_token_advantages(advantages.data_ptr<float>(), mask.data_ptr<scalar_t>(),
                             p.mask_prefix.empty() ? nullptr : p.mask_prefix.data(), n, T,
                             token_advantages.data_ptr<float>());
    });
  }
  return outputs_tuple(AdvantageResult{.advantages = advantages,
                                       .token_advantages = token_advantages,
                                       .density = density,
                                       .weights = weights,
                                       .energy = energy,
                                       .weighted_energy = weighted_energy,
                                       .active_groups = active,
                                       .num_groups = num_groups,
                                       .batch_mean = batch_mean,
                                       .batch_std = batch_std,
                                       .keep = keep,
                                       .query_scale = query_scale});
}

}  // namespace

TORCH_LIBRARY_IMPL(dara, CPU, m) {
  m.impl("fused_advantage", &fused_advantage_cpu);
  m.impl("accumulate", &accumulate_cpu);
}

}  // namespace dara
