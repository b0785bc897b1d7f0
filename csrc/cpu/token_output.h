// The response mask, read in its own dtype (bool, integer or floating) with
// no widened copy: its row sums are the token weights L_j, and the token
// output is advantages[j] * mask[j, t]. A row that is a prefix mask
// (1 ... 1 0 ... 0, the usual response-then-padding layout) is written from
// its length alone, so a call reads such a mask once, not twice.
#pragma once
#include <cstdint>
#include <type_traits>

#include "chunks.h"

namespace dara {

// Rows per chunk of the token passes: 64 rows of 2k int64 tokens are 1 MiB.
constexpr int64_t kMaskRowsPerChunk = 64;
constexpr int64_t kNotPrefix = -1;

// bool is read as its bytes: GCC leaves loops over bool loads scalar.
template <typename mask_t>
using mask_bytes_t = std::conditional_t<std::is_same_v<mask_t, bool>, uint8_t, mask_t>;

// sum_t mask[t] (exact in an integer for integer masks, in double for
// floating ones) and, when the row is 1 ... 1 0 ... 0, its count of ones
// (else kNotPrefix).
template <typename mask_t>
double row_sum(const mask_t* row, int64_t T, int64_t* prefix) {
  using sum_t = std::conditional_t<std::is_integral_v<mask_t>, int64_t, double>;
  sum_t total = 0;
  for (int64_t t = 0; t < T; ++t) total += static_cast<sum_t>(row[t]);
  const double sum = static_cast<double>(total);
  *prefix = kNotPrefix;
  const int64_t ones = static_cast<int64_t>(sum);
  if (!(sum >= 0.0 && sum <= static_cast<double>(T)) || static_cast<double>(ones) != sum) return sum;
  unsigned bad = 0;
  for (int64_t t = 0; t < ones; ++t) bad |= row[t] != mask_t(1);
  for (int64_t t = ones; t < T; ++t) bad |= row[t] != mask_t(0);
  if (bad == 0) *prefix = ones;
  return sum;
}

// out[j] = sum_t mask[j, t]; prefix[j] as row_sum gives it.
template <typename mask_t>
void mask_row_sums(const mask_t* mask_in, int64_t n, int64_t T, double* out, int64_t* prefix) {
  const auto* mask = reinterpret_cast<const mask_bytes_t<mask_t>*>(mask_in);
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t));
  for_each_chunk(n, kMaskRowsPerChunk, bytes, [&](int64_t, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) out[j] = row_sum(mask + j * T, T, prefix + j);
  });
}

// token_advantages[j, t] = advantages[j] * mask[j, t], as torch computes a
// float32 tensor times the mask (in double for a float64 mask); a prefix
// row (prefix[j] != kNotPrefix) from its length.
template <typename mask_t>
void write_token_advantages(const float* advantages, const mask_t* mask_in, const int64_t* prefix, int64_t n, int64_t T,
                            float* out) {
  const auto* mask = reinterpret_cast<const mask_bytes_t<mask_t>*>(mask_in);
  using product_t = std::conditional_t<std::is_same_v<mask_t, double>, double, float>;
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t) + sizeof(float));
  for_each_chunk(n, kMaskRowsPerChunk, bytes, [&](int64_t, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const product_t value = static_cast<product_t>(advantages[j]);
      float* dst = out + j * T;
      if (prefix[j] != kNotPrefix) {
        const float kept = static_cast<float>(value * product_t(1));
        const float masked = static_cast<float>(value * product_t(0));  // -0 for a negative advantage, as torch
        for (int64_t t = 0; t < prefix[j]; ++t) dst[t] = kept;
        for (int64_t t = prefix[j]; t < T; ++t) dst[t] = masked;
        continue;
      }
      for (int64_t t = 0; t < T; ++t) dst[t] = static_cast<float>(value * static_cast<product_t>(mask[j * T + t]));
    }
  });
}

}  // namespace dara
