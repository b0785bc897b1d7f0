// Scratch storage kept by each calling thread between chunks and calls: a
// stream of calls neither allocates nor page-faults it again. Nothing is
// cleared; users write every element they read.
#pragma once
#include <cstdint>
#include <vector>

namespace dara {

// At least n elements of T; `Use` tells apart buffers of one type that are
// live at the same time.
template <typename T, int Use>
T* thread_storage(int64_t n) {
  thread_local std::vector<T> storage;
  if (storage.size() < static_cast<size_t>(n)) storage.resize(n);
  return storage.data();
}

// The Use tags in this package.
enum StorageUse {
  kBatchMoments,
  kBatchGroups,
  kAffineTable,
  kTableValues,
  kTableFlags,
  kChunkSums,
  kGroupOrderRewards
};

}  // namespace dara
