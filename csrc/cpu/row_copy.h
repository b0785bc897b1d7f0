// Copies of whole reward rows between positions: with the row size known at
// compile time each copy is a register move, not a memcpy call.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dara {

// f(std::integral_constant<int64_t, B>) for the common row sizes, f(0) (size
// known only at run time) otherwise.
template <typename F>
void dispatch_row_bytes(int64_t row_bytes, const F& f) {
  switch (row_bytes) {
    case 4:
      return f(std::integral_constant<int64_t, 4>{});
    case 8:
      return f(std::integral_constant<int64_t, 8>{});
    case 12:
      return f(std::integral_constant<int64_t, 12>{});
    case 16:
      return f(std::integral_constant<int64_t, 16>{});
    case 32:
      return f(std::integral_constant<int64_t, 32>{});
    default:
      return f(std::integral_constant<int64_t, 0>{});
  }
}

template <int64_t kRowBytes>
inline void copy_row(const char* src, int64_t from, char* dst, int64_t to, int64_t row_bytes) {
  if constexpr (kRowBytes > 0) row_bytes = kRowBytes;
  std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
}

}  // namespace dara
