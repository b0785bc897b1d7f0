// A large output is usually fresh mmap'd memory (glibc maps blocks of 32 MiB
// and more directly), which the OS faults in 4 KiB at a time on first write:
// for the token-level output that costs about as long as writing it. Asking
// for transparent huge pages makes it 2 MiB at a time.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dara {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

inline at::Tensor empty_large_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor out = at::empty(sizes, options);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t begin = reinterpret_cast<uintptr_t>(out.data_ptr());
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = (begin + out.nbytes()) & ~(kHugePage - 1);
  // Advice only: where the OS declines it, the output is simply faulted in 4 KiB pages.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
  return out;
}

}  // namespace dara
