// Which rows form each group (docs/spec.md#inputs): contiguous blocks of G
// rows, or the groups of a group_index, ordered by id, each holding its rows
// in input order (a stable counting sort).
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "chunks.h"

namespace dara {

class GroupLayout {
 public:
  static GroupLayout contiguous(int64_t num_rows, int64_t group_size);
  static GroupLayout from_ids(const int64_t* ids, int64_t num_rows);

  int64_t num_groups() const { return num_groups_; }
  // The positions [begin, end) of group g's rows in group order.
  int64_t begin(int64_t g) const { return from_group_index() ? offsets_[g] : g * group_size_; }
  int64_t end(int64_t g) const { return from_group_index() ? offsets_[g + 1] : (g + 1) * group_size_; }
  // Whether the groups come from a group_index (their order may still equal
  // input order); positions() then gives each input row's position in group order.
  bool from_group_index() const { return group_size_ == 0; }
  const int64_t* positions() const { return positions_.get(); }

 private:
  int64_t num_groups_ = 0;
  int64_t group_size_ = 0;                // contiguous groups; 0 for a group_index
  std::vector<int64_t> offsets_;          // [B + 1] first position of each group
  std::shared_ptr<int64_t[]> positions_;  // [N] position of each input row in group order
};

// dst[positions[j]] = src[j] for the rows [n, width] of src: the copy into
// group order. Its writes land at random: two threads keep more in flight.
template <typename T>
void scatter_rows(const T* src, int64_t n, int width, const int64_t* positions, T* dst) {
  const int64_t grain = std::max<int64_t>(1, kBytesPerThread / (width * static_cast<int64_t>(sizeof(T)) + 8));
  at::parallel_for(0, n, grain, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      for (int k = 0; k < width; ++k) dst[positions[j] * width + k] = src[j * width + k];
    }
  });
}

}  // namespace dara
