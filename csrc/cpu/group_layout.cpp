#include "group_layout.h"

#include <algorithm>
#include <utility>

namespace dara {
namespace {

// Each row's key in [0, keys), ordered as the ids: the id's offset from the
// smallest when the ids span little more than the rows (verl's uid numbers,
// an arange), else the id's rank among the distinct ids (a sort).
struct Keys {
  const int64_t* ids;
  int64_t lo = 0;
  int64_t count = 0;
  std::vector<int64_t> ranks;  // empty for dense ids

  Keys(const int64_t* row_ids, int64_t n) : ids(row_ids) {
    // A loop of selects rather than std::minmax_element's branches: 4x faster on shuffled ids.
    lo = ids[0];
    int64_t hi = ids[0];
    for (int64_t j = 0; j < n; ++j) {
      lo = ids[j] < lo ? ids[j] : lo;
      hi = ids[j] > hi ? ids[j] : hi;
    }
    // Unsigned: ids may span the whole int64 range.
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    if (span < static_cast<uint64_t>(2 * n + 1024)) {
      count = static_cast<int64_t>(span) + 1;
      return;
    }
    std::vector<int64_t> distinct(ids, ids + n);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    ranks.resize(n);
    for (int64_t j = 0; j < n; ++j) {
      ranks[j] = std::lower_bound(distinct.begin(), distinct.end(), ids[j]) - distinct.begin();
    }
    count = static_cast<int64_t>(distinct.size());
  }

  int64_t operator[](int64_t j) const {
    return ranks.empty() ? static_cast<int64_t>(static_cast<uint64_t>(ids[j]) - static_cast<uint64_t>(lo)) : ranks[j];
  }
};

}  // namespace

GroupLayout GroupLayout::contiguous(int64_t num_rows, int64_t group_size) {
  GroupLayout layout;
  layout.group_size_ = group_size;
  layout.num_groups_ = num_rows / group_size;
  return layout;
}

// A stable counting sort of the rows by key: count each key, turn the
// counts into each group's first position, place the rows in input order.
// Each row's position is written in input order; only the copies between
// input and group order (scatter_rows, to_input_order) access memory at random.
GroupLayout GroupLayout::from_ids(const int64_t* ids, int64_t n) {
  GroupLayout layout;
  layout.offsets_.assign(1, 0);
  if (n == 0) return layout;
  const Keys key(ids, n);
  std::vector<int64_t> next(key.count, 0);
  for (int64_t j = 0; j < n; ++j) ++next[key[j]];
  layout.offsets_.reserve(std::min(key.count, n) + 1);
  int64_t position = 0;
  for (int64_t v = 0; v < key.count; ++v) {
    const int64_t count = std::exchange(next[v], position);
    position += count;
    if (count > 0) layout.offsets_.push_back(position);
  }
  // Every entry is written below: no zero fill.
  layout.positions_.reset(new int64_t[n]);
  int64_t* positions = layout.positions_.get();
  for (int64_t j = 0; j < n; ++j) positions[j] = next[key[j]]++;
  layout.num_groups_ = static_cast<int64_t>(layout.offsets_.size()) - 1;
  return layout;
}

}  // namespace dara
