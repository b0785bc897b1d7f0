#include "group_layout.h"

#include <algorithm>
#include <numeric>

namespace dara {

GroupLayout GroupLayout::contiguous(int64_t num_rows, int64_t group_size) {
  GroupLayout layout;
  layout.group_size_ = group_size;
  layout.num_groups_ = group_size > 0 ? num_rows / group_size : 0;
  return layout;
}

GroupLayout GroupLayout::from_ids(const int64_t* ids, int64_t num_rows) {
  GroupLayout layout;
  layout.csr_ = true;
  layout.rows_.resize(num_rows);
  if (num_rows == 0) {
    layout.offsets_.assign(1, 0);
    return layout;
  }
  auto [lo_it, hi_it] = std::minmax_element(ids, ids + num_rows);
  const int64_t lo = *lo_it;
  // Unsigned arithmetic: ids may span the whole int64 range.
  const uint64_t span = static_cast<uint64_t>(*hi_it) - static_cast<uint64_t>(lo);

  if (span < static_cast<uint64_t>(2 * num_rows + 1024)) {
    std::vector<int64_t> start(span + 2, 0);
    for (int64_t j = 0; j < num_rows; ++j) ++start[ids[j] - lo + 1];
    for (uint64_t v = 0; v <= span; ++v) start[v + 1] += start[v];
    layout.offsets_.reserve(num_rows + 1);
    for (uint64_t v = 0; v <= span; ++v) {
      if (start[v + 1] > start[v]) layout.offsets_.push_back(start[v]);
    }
    layout.offsets_.push_back(num_rows);
    for (int64_t j = 0; j < num_rows; ++j) layout.rows_[start[ids[j] - lo]++] = j;
  } else {
    std::iota(layout.rows_.begin(), layout.rows_.end(), 0);
    std::stable_sort(layout.rows_.begin(), layout.rows_.end(), [ids](int64_t a, int64_t b) { return ids[a] < ids[b]; });
    layout.offsets_.push_back(0);
    for (int64_t p = 1; p < num_rows; ++p) {
      if (ids[layout.rows_[p]] != ids[layout.rows_[p - 1]]) layout.offsets_.push_back(p);
    }
    layout.offsets_.push_back(num_rows);
  }
  layout.num_groups_ = static_cast<int64_t>(layout.offsets_.size()) - 1;
  return layout;
}

}  // namespace dara
