// Groups are processed in fixed-size chunks whose partial accumulators are
// summed in chunk order, so results are bitwise identical for any number of
// OpenMP threads.
#pragma once
#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>

namespace dara {

constexpr int64_t kGroupsPerChunk = 512;

inline int64_t num_chunks(int64_t num_groups) {
  return (num_groups + kGroupsPerChunk - 1) / kGroupsPerChunk;
}

template <typename F>
void for_each_chunk(int64_t num_groups, const F& body) {
  const int64_t chunks = num_chunks(num_groups);
#pragma omp parallel for schedule(static) num_threads(at::get_num_threads())
  for (int64_t c = 0; c < chunks; ++c) {
    body(c, c * kGroupsPerChunk, std::min(num_groups, (c + 1) * kGroupsPerChunk));
  }
}

}  // namespace dara
