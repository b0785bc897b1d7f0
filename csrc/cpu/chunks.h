// Groups (or rows) are processed in fixed-size chunks whose partial results
// are combined in chunk order, so results are bitwise identical for any
// number of threads. Chunks are handed out dynamically, so a thread slowed
// by a neighbour leaves its share to the others (see also idle_cores.h).
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "idle_cores.h"

namespace dara {

constexpr int64_t kGroupsPerChunk = 512;

// Work below this many bytes per thread finishes before a thread team would
// wake up (about 20 us of streaming): such calls run on the calling thread.
constexpr int64_t kBytesPerThread = 512 << 10;

inline int64_t num_chunks(int64_t items, int64_t per_chunk = kGroupsPerChunk) {
  return (items + per_chunk - 1) / per_chunk;
}

// Threads for a loop: as many as its work pays for, no more than the caller
// allows (torch.set_num_threads) and no more than the cores nobody else is using.
inline int threads_for(int64_t bytes, int64_t chunks) {
  const int64_t by_work = std::min<int64_t>({bytes / kBytesPerThread, chunks, at::get_num_threads()});
  return by_work <= 1 ? 1 : static_cast<int>(std::min<int64_t>(by_work, idle_cores()));
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
