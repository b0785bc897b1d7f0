// The token-level output is tens of MiB. Fresh memory of that size is mapped
// from the OS on every call, which zeroes it page by page on first write: in a
// profile that cost four times the output's own writes. So its buffers are
// recycled: when a caller drops a call's output, the buffer goes back to a
// small pool and the next call of that size reuses it, already mapped. The
// pool holds at most kPoolBuffers buffers and kPoolBytes in all; beyond that,
// a freed buffer goes back to the OS. New buffers ask for transparent huge
// pages, so the first call is faulted in 2 MiB at a time.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dara {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPoolBuffers = 4;
constexpr size_t kPoolBytes = size_t{1} << 30;

class OutputPool {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second != bytes) continue;
        void* buffer = it->first;
        held_ -= bytes;
        free_.erase(it);
        return buffer;
      }
    }
    void* buffer = std::aligned_alloc(kHugePage, bytes);
    TORCH_CHECK(buffer, "dara: could not allocate ", bytes, " bytes for the token-level output");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Advice only: where the OS declines it, the buffer is faulted in 4 KiB pages.
    madvise(buffer, bytes, MADV_HUGEPAGE);
#endif
    return buffer;
  }

  void give(void* buffer, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.size() < kPoolBuffers && held_ + bytes <= kPoolBytes) {
        free_.emplace_back(buffer, bytes);
        held_ += bytes;
        return;
      }
    }
    std::free(buffer);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<void*, size_t>> free_;
  size_t held_ = 0;
};

// Never destroyed: an output may be freed after static destructors have run.
inline OutputPool& output_pool() {
  static OutputPool* pool = new OutputPool;
  return *pool;
}

// An uninitialised tensor whose buffer returns to the pool when freed.
// Its storage cannot be resized (like any tensor over external memory).
inline at::Tensor empty_large_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t elements = static_cast<size_t>(c10::multiply_integers(sizes));
  const size_t bytes = (elements * options.dtype().itemsize() + kHugePage - 1) / kHugePage * kHugePage;
  if (elements == 0) return at::empty(sizes, options);
  void* buffer = output_pool().take(bytes);
  at::Tensor out = at::from_blob(buffer, sizes, [bytes](void* data) { output_pool().give(data, bytes); }, options);
  // As at::empty does under torch.utils.deterministic.fill_uninitialized_memory,
  // so a recycled buffer cannot hide an element the kernel failed to write.
  const auto& context = at::globalContext();
  if (context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory()) {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

}  // namespace dara
