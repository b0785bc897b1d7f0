// Work is split into fixed-size chunks whose partial results are combined in
// chunk order, so results are bitwise identical for any number of threads.
// The thread count is the caller's (torch.set_num_threads); a call uses more
// than one thread only when its work repays starting them.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace dara {

constexpr int64_t kGroupsPerChunk = 256;

// Each thread should move at least this much memory (about 50 us of
// streaming) for a thread team's start-up and join to pay.
constexpr int64_t kBytesPerThread = 1 << 20;

inline int64_t num_chunks(int64_t items, int64_t per_chunk) { return (items + per_chunk - 1) / per_chunk; }

// body(chunk, first, last) for every chunk of per_chunk items in [0, items);
// `bytes` is the memory the whole loop moves.
template <typename F>
void for_each_chunk(int64_t items, int64_t per_chunk, int64_t bytes, const F& body) {
  const int64_t chunks = num_chunks(items, per_chunk);
  if (chunks == 0) return;
  const int64_t chunk_bytes = std::max<int64_t>(1, bytes / chunks);
  const int64_t grain = std::max<int64_t>(1, kBytesPerThread / chunk_bytes);
  at::parallel_for(0, chunks, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) body(c, c * per_chunk, std::min(items, (c + 1) * per_chunk));
  });
}

}  // namespace dara
