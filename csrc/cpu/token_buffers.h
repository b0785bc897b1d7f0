// The token output's buffer. The output is tens of MiB, and a fresh
// allocation that size is mapped from the OS on every call and zeroed page
// by page on its first write, which costs far more than writing it (18 ms
// against 1 ms for 32 MiB on the 2-core CI machine; keeping a buffer makes
// verl's token path with a bool mask 2.15x faster). So the last freed
// output buffer is kept for the next call, which reuses it when its
// capacity is at most twice the request (RL response lengths change every
// step): one buffer, at most set_token_cache_bytes bytes (default 256 MiB;
// 0 keeps none). New buffers ask for transparent huge pages, so even a
// first call faults its output in 2 MiB at a time.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dara {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr int64_t kDefaultTokenCacheBytes = int64_t{256} << 20;

class TokenBuffers {
 public:
  void* take(size_t bytes, size_t* capacity) {
    const size_t needed = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (kept_ && kept_capacity_ >= needed && kept_capacity_ <= 2 * needed) {
        *capacity = kept_capacity_;
        return std::exchange(kept_, nullptr);
      }
    }
    *capacity = needed;
    void* data = std::aligned_alloc(kHugePage, needed);
    TORCH_CHECK(data, "dara: could not allocate ", needed, " bytes for the token-level output");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(data, needed, MADV_HUGEPAGE);  // advice: where the OS declines, 4 KiB pages
#endif
    return data;
  }

  // Keeps the buffer (freeing the one kept before) if it is within the bound.
  void give(void* data, size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (capacity <= static_cast<size_t>(limit_)) {
        std::swap(kept_, data);
        kept_capacity_ = capacity;
      }
    }
    std::free(data);
  }

  // Sets the bound and frees a kept buffer over it; returns the previous bound.
  int64_t set_limit(int64_t bytes) {
    TORCH_CHECK(bytes >= 0, "dara: the token output cache's bound must be >= 0 bytes, got ", bytes);
    void* freed = nullptr;
    int64_t previous;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      previous = std::exchange(limit_, bytes);
      if (kept_ && kept_capacity_ > static_cast<size_t>(limit_)) freed = std::exchange(kept_, nullptr);
    }
    std::free(freed);
    return previous;
  }

 private:
  std::mutex mutex_;
  void* kept_ = nullptr;
  size_t kept_capacity_ = 0;
  int64_t limit_ = kDefaultTokenCacheBytes;
};

// Never destroyed: an output may be freed after static destructors have run.
inline TokenBuffers& token_buffers() {
  static TokenBuffers* buffers = new TokenBuffers;
  return *buffers;
}

// An uninitialised float tensor whose buffer goes back to token_buffers()
// when it is freed. Like any tensor over external memory, its storage
// cannot be resized.
inline at::Tensor empty_token_output(int64_t n, int64_t T) {
  if (n * T == 0) return at::empty({n, T}, at::kFloat);
  size_t capacity;
  void* data = token_buffers().take(static_cast<size_t>(n * T) * sizeof(float), &capacity);
  at::Tensor out = at::from_blob(data, {n, T}, [capacity](void* p) { token_buffers().give(p, capacity); }, at::kFloat);
  // As at::empty does under torch.utils.deterministic.fill_uninitialized_memory,
  // so a reused buffer cannot hide an element the kernel failed to write.
  const auto& context = at::globalContext();
  if (context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory()) {
    out.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  return out;
}

}  // namespace dara
