// The response mask read in its own dtype (bool, integer or floating), with
// no widened copy of it. The first pass sums each row (the token weights L_j)
// and notes whether the row is a prefix mask (1 ... 1 0 ... 0, the usual
// response-then-padding layout). The token output then writes a prefix row
// from its length alone, so such masks are read once per call.
#pragma once
#include <cstdint>
#include <type_traits>

#include "chunks.h"
#include "cpu_isa.h"

namespace dara {

// Rows per chunk of the token passes: 64 rows of 2k int64 tokens are 1 MiB.
constexpr int64_t kMaskRowsPerChunk = 64;
constexpr int64_t kNotPrefix = -1;

// Integer and bool masks sum exactly in an integer; floating masks in double.
template <typename mask_t>
using mask_sum_t =
    std::conditional_t<std::is_integral_v<mask_t>, std::conditional_t<sizeof(mask_t) == 1, uint32_t, int64_t>, double>;

// Independent partial sums of a floating mask row, so the adds run in SIMD
// lanes in a fixed order (a single running double sum cannot be vectorised).
constexpr int kSumLanes = 8;

template <typename mask_t>
double row_sum(const mask_t* row, int64_t T) {
  if constexpr (std::is_integral_v<mask_t>) {
    mask_sum_t<mask_t> total = 0;
    for (int64_t t = 0; t < T; ++t) total += static_cast<mask_sum_t<mask_t>>(row[t]);
    return static_cast<double>(total);
  } else {
    double lanes[kSumLanes] = {};
    const int64_t whole = T - T % kSumLanes;
    for (int64_t t = 0; t < whole; t += kSumLanes) {
      for (int l = 0; l < kSumLanes; ++l) lanes[l] += static_cast<double>(row[t + l]);
    }
    for (int64_t t = whole; t < T; ++t) lanes[t - whole] += static_cast<double>(row[t]);
    double total = 0.0;
    for (int l = 0; l < kSumLanes; ++l) total += lanes[l];
    return total;
  }
}

// Whether the row is 1 ... 1 0 ... 0, given its sum: such a row is exactly
// (t < sum) at every t. Comparing with that pattern is two loops against a
// constant, which run in SIMD lanes (the row is still in L1 from the sum).
template <typename mask_t>
bool is_prefix_row(const mask_t* row, int64_t T, double sum) {
  if (!(sum >= 0.0 && sum <= static_cast<double>(T))) return false;
  const int64_t ones = static_cast<int64_t>(sum);
  if (static_cast<double>(ones) != sum) return false;
  const mask_t zero = static_cast<mask_t>(0), one = static_cast<mask_t>(1);
  unsigned bad = 0;
  for (int64_t t = 0; t < ones; ++t) bad |= row[t] != one;
  for (int64_t t = ones; t < T; ++t) bad |= row[t] != zero;
  return bad == 0;
}

// out[j] = sum_t mask[j, t]; prefix[j] = that sum when row j is a prefix row, else kNotPrefix.
template <typename mask_t>
void mask_row_sums(const mask_t* mask, int64_t n, int64_t T, double* out, int64_t* prefix) {
  // The same bytes as uint8: GCC leaves loops over bool loads scalar.
  if constexpr (std::is_same_v<mask_t, bool>) {
    return mask_row_sums(reinterpret_cast<const uint8_t*>(mask), n, T, out, prefix);
  }
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t));
  for_each_chunk(
      n, bytes,
      [&](int64_t, int64_t j0, int64_t j1) {
        with_cpu_isa([&] {
          for (int64_t j = j0; j < j1; ++j) {
            const mask_t* row = mask + j * T;
            out[j] = row_sum(row, T);
            prefix[j] = is_prefix_row(row, T, out[j]) ? static_cast<int64_t>(out[j]) : kNotPrefix;
          }
        });
      },
      kMaskRowsPerChunk);
}

// token_advantages[j, t] = advantages[j] * mask[j, t], as torch's float32 x
// mask product computes it (in double for a float64 mask).
template <typename mask_t>
void write_token_advantages(const float* advantages, const mask_t* mask, const int64_t* prefix, int64_t n, int64_t T,
                            float* out) {
  if constexpr (std::is_same_v<mask_t, bool>) {
    return write_token_advantages(advantages, reinterpret_cast<const uint8_t*>(mask), prefix, n, T, out);
  }
  using product_t = std::conditional_t<std::is_same_v<mask_t, double>, double, float>;
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t) + sizeof(float));
  for_each_chunk(
      n, bytes,
      [&](int64_t, int64_t j0, int64_t j1) {
        with_cpu_isa([&] {
          for (int64_t j = j0; j < j1; ++j) {
            const product_t value = static_cast<product_t>(advantages[j]);
            float* dst = out + j * T;
            if (prefix && prefix[j] != kNotPrefix) {
              const float kept = static_cast<float>(value * product_t(1));
              const float masked = static_cast<float>(value * product_t(0));  // -0 for a negative advantage, as torch
              for (int64_t t = 0; t < prefix[j]; ++t) dst[t] = kept;
              for (int64_t t = prefix[j]; t < T; ++t) dst[t] = masked;
              continue;
            }
            const mask_t* row = mask + j * T;
            for (int64_t t = 0; t < T; ++t) dst[t] = static_cast<float>(value * static_cast<product_t>(row[t]));
          }
        });
      },
      kMaskRowsPerChunk);
}

}  // namespace dara
