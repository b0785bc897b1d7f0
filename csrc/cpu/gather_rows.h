// The one gather of the rewards into group order for a group_index layout,
// on the kernels' own threads (idle cores only, see chunks.h): the kernels
// then stream the rewards.
#pragma once
#include <cstdint>
#include <cstring>

#include "chunks.h"

namespace dara {

// Rows per chunk of the gather: 8k rows of a few rewards are ~100 KiB.
constexpr int64_t kGatherRowsPerChunk = 8192;

template <int64_t kRowBytes>
void gather_fixed(const char* src, const int64_t* order, int64_t p0, int64_t p1, char* dst) {
  for (int64_t p = p0; p < p1; ++p) std::memcpy(dst + p * kRowBytes, src + order[p] * kRowBytes, kRowBytes);
}

inline void gather_rows(const char* src, const int64_t* order, int64_t n, int64_t row_bytes, char* dst) {
  for_each_chunk(
      n, n * row_bytes * 2,
      [&](int64_t, int64_t p0, int64_t p1) {
        // A compile-time row size turns each copy into a register move, not a memcpy call.
        switch (row_bytes) {
          case 4:
            return gather_fixed<4>(src, order, p0, p1, dst);
          case 8:
            return gather_fixed<8>(src, order, p0, p1, dst);
          case 12:
            return gather_fixed<12>(src, order, p0, p1, dst);
          case 16:
            return gather_fixed<16>(src, order, p0, p1, dst);
          case 32:
            return gather_fixed<32>(src, order, p0, p1, dst);
          default:
            for (int64_t p = p0; p < p1; ++p) std::memcpy(dst + p * row_bytes, src + order[p] * row_bytes, row_bytes);
        }
      },
      kGatherRowsPerChunk);
}

}  // namespace dara
