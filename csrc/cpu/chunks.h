// Groups (or rows) are processed in fixed-size chunks whose partial results
// are combined in chunk order, so results are bitwise identical for any
// number of threads. Chunks are handed out dynamically: when another process
// holds a core, the thread that has one takes the remaining chunks instead
// of the whole call waiting for the slowed one.
#pragma once
#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>

namespace dara {

constexpr int64_t kGroupsPerChunk = 512;

// Work below this many bytes per thread finishes before a thread team would
// wake up (about 20 us of streaming): such calls run on the calling thread.
constexpr int64_t kBytesPerThread = 512 << 10;

inline int64_t num_chunks(int64_t items, int64_t per_chunk = kGroupsPerChunk) {
  return (items + per_chunk - 1) / per_chunk;
}

inline int threads_for(int64_t bytes, int64_t chunks) {
  const int64_t by_work = std::max<int64_t>(1, bytes / kBytesPerThread);
  return static_cast<int>(std::min<int64_t>({by_work, chunks, at::get_num_threads()}));
}

// body(chunk, first, last) over [0, items) in chunks of per_chunk items;
// `bytes` is the memory the whole loop moves.
template <typename F>
void for_each_chunk(int64_t items, int64_t bytes, const F& body, int64_t per_chunk = kGroupsPerChunk) {
  const int64_t chunks = num_chunks(items, per_chunk);
  const int threads = threads_for(bytes, chunks);
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) body(c, c * per_chunk, std::min(items, (c + 1) * per_chunk));
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t c = 0; c < chunks; ++c) {
    body(c, c * per_chunk, std::min(items, (c + 1) * per_chunk));
  }
}

}  // namespace dara
