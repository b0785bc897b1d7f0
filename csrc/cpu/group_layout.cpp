#include "group_layout.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "chunks.h"
#include "row_copy.h"

namespace dara {
namespace {

// Rows a sort slice holds at least: fewer would not repay a thread's start.
constexpr int64_t kRowsPerSortSlice = 8192;

// Memory one sort moves per row: the id read twice, the group number
// written, the copied row read and written.
int64_t sort_bytes(int64_t n, const RowCopy& copy) { return n * (3 * 8 + 2 * copy.row_bytes); }

int sort_slices(int64_t n, const RowCopy& copy) {
  return threads_for(sort_bytes(n, copy), num_chunks(n, kRowsPerSortSlice));
}

// body(slice, first, last) over `slices` equal ranges of [0, n), one thread
// each. A stable sort's result does not depend on the slicing, so it is the
// same for any thread count.
template <typename F>
void for_each_slice(int64_t n, int slices, const F& body) {
  const int64_t per = (n + slices - 1) / slices;
#pragma omp parallel for schedule(static, 1) num_threads(slices) if (slices > 1)
  for (int s = 0; s < slices; ++s) body(s, std::min(n, s * per), std::min(n, (s + 1) * per));
}

std::pair<int64_t, int64_t> id_range(const int64_t* ids, int64_t n, int slices) {
  std::vector<int64_t> lo(slices, ids[0]), hi(slices, ids[0]);
  for_each_slice(n, slices, [&](int s, int64_t j0, int64_t j1) {
    int64_t a = ids[0], b = ids[0];
    for (int64_t j = j0; j < j1; ++j) {
      a = std::min(a, ids[j]);
      b = std::max(b, ids[j]);
    }
    lo[s] = a;
    hi[s] = b;
  });
  return {*std::min_element(lo.begin(), lo.end()), *std::max_element(hi.begin(), hi.end())};
}

}  // namespace

GroupLayout GroupLayout::contiguous(int64_t num_rows, int64_t group_size) {
  GroupLayout layout;
  layout.group_size_ = group_size;
  layout.num_groups_ = group_size > 0 ? num_rows / group_size : 0;
  return layout;
}

GroupLayout GroupLayout::from_ids(const int64_t* ids, int64_t num_rows, const RowCopy& copy) {
  GroupLayout layout;
  layout.csr_ = true;
  layout.group_of_row_.resize(num_rows);
  if (num_rows == 0) {
    layout.offsets_.assign(1, 0);
    return layout;
  }
  const auto [lo, hi] = id_range(ids, num_rows, sort_slices(num_rows, copy));
  // Unsigned arithmetic: ids may span the whole int64 range.
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (span < static_cast<uint64_t>(2 * num_rows + 1024)) {
    layout.count_sort(ids, lo, span, copy);
  } else {
    layout.stable_sort(ids, copy);
  }
  layout.num_groups_ = static_cast<int64_t>(layout.offsets_.size()) - 1;
  return layout;
}

// Each slice counts its ids; one pass over the values turns the counts into
// each (value, slice)'s first position and numbers the groups; each slice
// then copies its rows to their positions, which keeps them in input order
// within a group, and notes each row's group.
void GroupLayout::count_sort(const int64_t* ids, int64_t lo, uint64_t span, const RowCopy& copy) {
  const int64_t n = static_cast<int64_t>(group_of_row_.size());
  const int slices = sort_slices(n, copy);
  const int64_t values = static_cast<int64_t>(span) + 1;
  std::vector<int64_t> start(slices * values, 0), group_of_value(values);
  for_each_slice(n, slices, [&](int s, int64_t j0, int64_t j1) {
    int64_t* count = start.data() + s * values;
    for (int64_t j = j0; j < j1; ++j) ++count[ids[j] - lo];
  });
  offsets_.reserve(std::min<int64_t>(values, n) + 1);
  int64_t position = 0;
  for (int64_t v = 0; v < values; ++v) {
    const int64_t first = position;
    for (int s = 0; s < slices; ++s) position += std::exchange(start[s * values + v], position);
    if (position > first) {
      group_of_value[v] = static_cast<int64_t>(offsets_.size());
      offsets_.push_back(first);
    }
  }
  offsets_.push_back(n);
  dispatch_row_bytes(copy.row_bytes, [&](auto row_bytes) {
    constexpr int64_t B = decltype(row_bytes)::value;
    for_each_slice(n, slices, [&](int s, int64_t j0, int64_t j1) {
      int64_t* next = start.data() + s * values;
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t v = ids[j] - lo;
        group_of_row_[j] = group_of_value[v];
        copy_row<B>(copy.src, j, copy.dst, next[v]++, copy.row_bytes);
      }
    });
  });
}

void GroupLayout::stable_sort(const int64_t* ids, const RowCopy& copy) {
  const int64_t n = static_cast<int64_t>(group_of_row_.size());
  rows_.resize(n);
  std::iota(rows_.begin(), rows_.end(), 0);
  std::stable_sort(rows_.begin(), rows_.end(), [ids](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  offsets_.push_back(0);
  group_of_row_[rows_[0]] = 0;
  for (int64_t p = 1; p < n; ++p) {
    if (ids[rows_[p]] != ids[rows_[p - 1]]) offsets_.push_back(p);
    group_of_row_[rows_[p]] = static_cast<int64_t>(offsets_.size()) - 1;
  }
  offsets_.push_back(n);
  dispatch_row_bytes(copy.row_bytes, [&](auto row_bytes) {
    constexpr int64_t B = decltype(row_bytes)::value;
    for_each_slice(n, sort_slices(n, copy), [&](int, int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) copy_row<B>(copy.src, rows_[p], copy.dst, p, copy.row_bytes);
    });
  });
}

// The positions' input rows, from each row's group: rows keep their input
// order within a group, as the sort placed them.
void GroupLayout::ensure_rows() const {
  if (!csr_ || !rows_.empty() || group_of_row_.empty()) return;
  const int64_t n = static_cast<int64_t>(group_of_row_.size());
  rows_.resize(n);
  std::vector<int64_t> next(offsets_.begin(), offsets_.end() - 1);
  for (int64_t j = 0; j < n; ++j) rows_[next[group_of_row_[j]]++] = j;
}

}  // namespace dara
