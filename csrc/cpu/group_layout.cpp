#include "group_layout.h"

#include <algorithm>

namespace dara {
namespace {

// Each row's key in [0, keys), ordered as the ids: the id's offset from the
// smallest when the ids span little more than the rows (verl's uid numbers,
// any arange), else the id's rank among the distinct ids.
std::vector<int64_t> dense_keys(const int64_t* ids, int64_t n, int64_t* keys) {
  const auto [lo, hi] = std::minmax_element(ids, ids + n);
  // Unsigned: ids may span the whole int64 range.
  const uint64_t span = static_cast<uint64_t>(*hi) - static_cast<uint64_t>(*lo);
  std::vector<int64_t> key(n);
  if (span < static_cast<uint64_t>(2 * n + 1024)) {
    for (int64_t j = 0; j < n; ++j) key[j] = static_cast<int64_t>(static_cast<uint64_t>(ids[j]) - *lo);
    *keys = static_cast<int64_t>(span) + 1;
    return key;
  }
  std::vector<int64_t> distinct(ids, ids + n);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int64_t j = 0; j < n; ++j) key[j] = std::lower_bound(distinct.begin(), distinct.end(), ids[j]) - distinct.begin();
  *keys = static_cast<int64_t>(distinct.size());
  return key;
}

}  // namespace

GroupLayout GroupLayout::contiguous(int64_t num_rows, int64_t group_size) {
  GroupLayout layout;
  layout.group_size_ = group_size;
  layout.num_groups_ = num_rows / group_size;
  return layout;
}

GroupLayout GroupLayout::from_ids(const int64_t* ids, int64_t n) {
  GroupLayout layout;
  layout.offsets_.assign(1, 0);
  if (n == 0) return layout;
  int64_t keys = 0;
  const std::vector<int64_t> key = dense_keys(ids, n, &keys);
  // Counting sort: each key's first position, keys no row has left out.
  std::vector<int64_t> next(keys, 0);
  for (int64_t j = 0; j < n; ++j) ++next[key[j]];
  int64_t position = 0;
  for (int64_t v = 0; v < keys; ++v) {
    const int64_t count = next[v];
    next[v] = position;
    position += count;
    if (count > 0) layout.offsets_.push_back(position);
  }
  layout.rows_.resize(n);
  for (int64_t j = 0; j < n; ++j) layout.rows_[next[key[j]]++] = j;
  layout.num_groups_ = static_cast<int64_t>(layout.offsets_.size()) - 1;
  return layout;
}

}  // namespace dara
