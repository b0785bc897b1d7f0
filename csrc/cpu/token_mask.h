// The response mask read in its own dtype (bool, integer or floating): the
// token weights L_j (row sums) and the token-level output, each one
// streaming pass over the mask with no widened copy of it.
#pragma once
#include <cstdint>
#include <type_traits>

#include "chunks.h"

namespace dara {

// Rows per chunk of the token passes: 64 rows of 2k int64 tokens are 1 MiB.
constexpr int64_t kMaskRowsPerChunk = 64;

// Integer and bool masks sum exactly in an integer; floating masks in double.
template <typename mask_t>
using mask_sum_t = std::conditional_t<std::is_integral_v<mask_t>,
                                      std::conditional_t<sizeof(mask_t) == 1, uint32_t, int64_t>, double>;

template <typename mask_t>
void mask_row_sums(const mask_t* mask, int64_t n, int64_t T, double* out) {
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t));
  for_each_chunk(n, bytes, [&](int64_t, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const mask_t* row = mask + j * T;
      mask_sum_t<mask_t> total = 0;
      for (int64_t t = 0; t < T; ++t) total += static_cast<mask_sum_t<mask_t>>(row[t]);
      out[j] = static_cast<double>(total);
    }
  }, kMaskRowsPerChunk);
}

// token_advantages[j, t] = advantages[j] * mask[j, t], as torch's float32 x
// mask product computes it (in double for a float64 mask).
template <typename mask_t>
void write_token_advantages(const float* advantages, const mask_t* mask, int64_t n, int64_t T, float* out) {
  using product_t = std::conditional_t<std::is_same_v<mask_t, double>, double, float>;
  const int64_t bytes = n * T * static_cast<int64_t>(sizeof(mask_t) + sizeof(float));
  for_each_chunk(n, bytes, [&](int64_t, int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const product_t value = static_cast<product_t>(advantages[j]);
      const mask_t* row = mask + j * T;
      float* dst = out + j * T;
      for (int64_t t = 0; t < T; ++t) dst[t] = static_cast<float>(value * static_cast<product_t>(row[t]));
    }
  }, kMaskRowsPerChunk);
}

}  // namespace dara
