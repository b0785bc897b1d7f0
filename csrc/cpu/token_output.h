// The response mask, read in its own dtype (bool, integer or floating) with
// no widened copy: its row sums are the token weights L_j, and the token
// output is advantages[j] * mask[j, t].
#pragma once
#include <cstdint>
#include <type_traits>

#include "chunks.h"

namespace dara {

// Rows per chunk of the token passes: 64 rows of 2k int64 tokens are 1 MiB.
constexpr int64_t kMaskRowsPerChunk = 64;

// bool is read as its bytes: GCC leaves loops over bool loads scalar.
template <typename mask_t>
using mask_bytes_t = std::conditional_t<std::is_same_v<mask_t, bool>, uint8_t, mask_t>;

// out[j] = sum_t mask[j, t], exact in an integer for integer masks, in
// double for floating ones.
template <typename mask_t>
void mask_row_sums(const mask_t* mask_in, int64_t n, int64_t T, double* out) {
  const auto* mask = reinterpret_cast<const mask_bytes_t<mask_t>*>(mask_in);
  using sum_t = std::conditional_t<std::is_integral_v<mask_t>, int64_t, double>;
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t));
  for_each_chunk(n, kMaskRowsPerChunk, bytes, [&](int64_t, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      sum_t total = 0;
      for (int64_t t = 0; t < T; ++t) total += static_cast<sum_t>(mask[j * T + t]);
      out[j] = static_cast<double>(total);
    }
  });
}

// token_advantages[j, t] = advantages[j] * mask[j, t], as torch computes a
// float32 tensor times the mask (in double for a float64 mask; -0 for a
// negative advantage on a masked token, as torch gives).
template <typename mask_t>
void write_token_advantages(const float* advantages, const mask_t* mask_in, int64_t n, int64_t T, float* out) {
  const auto* mask = reinterpret_cast<const mask_bytes_t<mask_t>*>(mask_in);
  using product_t = std::conditional_t<std::is_same_v<mask_t, double>, double, float>;
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t) + sizeof(float));
  for_each_chunk(n, kMaskRowsPerChunk, bytes, [&](int64_t, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const product_t value = static_cast<product_t>(advantages[j]);
      for (int64_t t = 0; t < T; ++t) {
        out[j * T + t] = static_cast<float>(value * static_cast<product_t>(mask[j * T + t]));
      }
    }
  });
}

}  // namespace dara
