// The checks both bindings make before they read a tensor, one message per
// error. The Python front makes the same checks first (dara_kernels/validation.py);
// these guard a direct call of torch.ops.dara.*, where a wrong size would be
// an out-of-bounds read.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "core/generated_tables.h"

namespace dara {

using OptTensor = std::optional<at::Tensor>;

struct CheckedCall {
  int64_t n;
  int K;
  Options options;
  AccumulatorLayout L;
};

inline void check_on_device(const OptTensor& t, const at::Tensor& rewards, const char* name) {
  if (!t.has_value()) return;
  TORCH_CHECK(t->device() == rewards.device(), "dara: ", name, " must be on ", rewards.device(), " like rewards, got ",
              t->device());
}

inline void check_elements(const OptTensor& t, int64_t size, const char* name) {
  if (!t.has_value()) return;
  TORCH_CHECK(t->numel() == size, "dara: ", name, " must have ", size, " elements, got ", t->numel());
}

// The option vector: the scalar fields, then the column indices of the option whose kind indexes reward
// columns (wire.INDEXED_COLUMNS: reward_gates' (gated, gate) pairs), each below K (is_reward_column).
inline Options checked_options(at::ArrayRef<double> options, int K) {
  const int64_t columns = static_cast<int64_t>(options.size()) - kNumOptions;
  TORCH_CHECK(columns >= 0 && columns % kColumnEntry == 0, "dara: expected ", kNumOptions,
              " options and (gated, gate) column pairs, got ", options.size(), " values");
  for (size_t i = kNumOptions; i < options.size(); ++i) {
    TORCH_CHECK(is_reward_column(options[i], K), "dara: a gate pair's column must be an index below K = ", K, ", got ",
                options[i]);
  }
  return options_from_vector(options.data(), static_cast<int64_t>(options.size()));
}

// `device` names the backend ("CPU", "CUDA"); max_rewards is its column limit.
inline CheckedCall check_call(const char* device, bool on_device, int max_rewards, const at::Tensor& rewards,
                              const OptTensor& group_index, int64_t group_size, const at::Tensor& reward_weights,
                              const OptTensor& response_mask, const OptTensor& response_lengths,
                              const OptTensor& reward_bounds, at::ArrayRef<double> options) {
  TORCH_CHECK(rewards.dim() == 2 && on_device, "dara: rewards must be a [N, K] ", device, " tensor");
  const int64_t n = rewards.size(0);
  TORCH_CHECK(rewards.size(1) >= 1 && rewards.size(1) <= max_rewards, "dara: the ", device, " backend supports 1 to ",
              max_rewards, " reward columns, got ", rewards.size(1));
  const int K = static_cast<int>(rewards.size(1));
  const Options o = checked_options(options, K);
  check_elements(reward_weights, K, "reward_weights");
  check_on_device(reward_weights, rewards, "reward_weights");
  if (group_index.has_value()) {
    check_elements(group_index, n, "group_index");
    check_on_device(group_index, rewards, "group_index");
  } else {
    TORCH_CHECK(group_size >= 1 && n % group_size == 0, "dara: group_size must divide N = ", n, ", got ", group_size);
  }
  if (response_mask.has_value()) {
    TORCH_CHECK(response_mask->dim() == 2 && response_mask->size(0) == n,
                "dara: response_mask must be [N, T] with N = ", n, ", got ", response_mask->sizes());
    check_on_device(response_mask, rewards, "response_mask");
  }
  check_elements(response_lengths, n, "response_lengths");
  check_on_device(response_lengths, rewards, "response_lengths");
  TORCH_CHECK(o.batch_norm != kTokenNorm || response_mask.has_value() || response_lengths.has_value(),
              "dara: token batch normalisation needs response_mask or response_lengths");
  check_elements(reward_bounds, 2 * static_cast<int64_t>(K), "reward_bounds");
  check_on_device(reward_bounds, rewards, "reward_bounds");
  return {n, K, o, AccumulatorLayout{K, o.combined_columns(K)}};
}

// All-reduced accumulators or extrema (distributed mode), as float64 on the rewards' device, or undefined.
inline at::Tensor given_sums(const OptTensor& t, int64_t size, const at::Tensor& rewards, const char* name) {
  if (!t.has_value()) return {};
  check_elements(t, size, name);
  check_on_device(t, rewards, name);
  return t->to(at::kDouble).contiguous();
}

}  // namespace dara
