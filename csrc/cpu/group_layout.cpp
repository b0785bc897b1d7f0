#include "group_layout.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "chunks.h"
#include "cpu_isa.h"
#include "row_copy.h"

namespace dara {
namespace {

// Rows a sort slice holds at least: fewer would not repay a thread's start.
constexpr int64_t kRowsPerSortSlice = 8192;

// Memory one sort moves per row: the id read three times (range, count,
// placement), the copied row read and written.
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

// The smallest and largest of ids [j0, j1), as a loop of its own so that it
// runs in SIMD lanes (see run_loop).
struct IdRange {
  static void run(const int64_t* __restrict ids, int64_t j0, int64_t j1, int64_t* __restrict range) {
    int64_t lo = ids[j0], hi = ids[j0];
    for (int64_t j = j0; j < j1; ++j) {
      lo = ids[j] < lo ? ids[j] : lo;
      hi = ids[j] > hi ? ids[j] : hi;
    }
    range[0] = lo;
    range[1] = hi;
  }
};

std::pair<int64_t, int64_t> id_range(const int64_t* ids, int64_t n, int slices) {
  std::vector<int64_t> range(2 * slices);
  for_each_slice(n, slices, [&](int s, int64_t j0, int64_t j1) {
    if (j0 < j1) {
      run_loop<IdRange>(ids, j0, j1, range.data() + 2 * s);
    } else {
      range[2 * s] = range[2 * s + 1] = ids[0];
    }
  });
  int64_t lo = range[0], hi = range[1];
  for (int s = 1; s < slices; ++s) {
    lo = std::min(lo, range[2 * s]);
    hi = std::max(hi, range[2 * s + 1]);
  }
  return {lo, hi};
}

// Rows ahead whose destination line the scatter prefetches before it stores
// there. Each row's store misses the cache, and a missing store holds up the
// stores behind it, so without the prefetch only a few misses are in flight:
// count and scatter took 5.3 ms at 2 threads without it, 3.9 ms with it, in
// a standalone copy (N = 2^20, 16-byte rows, 65,536 groups); 8 to 128 rows
// ahead did alike. The baseline build emits a read prefetch for it; the
// prefetch for writing (-mprfchw) measured no better.
constexpr int64_t kPlaceAhead = 16;

// Input rows [j0, j1) of src to dst at next[ids[j] - lo]++. The loop's
// values are locals: the row copies store through char pointers, which may
// alias anything, and would otherwise reload every captured value per row.
template <int64_t B>
void place_rows(const int64_t* __restrict ids, int64_t lo, int64_t j0, int64_t j1, const char* src, char* dst,
                int64_t row_bytes, int64_t* __restrict next) {
  if constexpr (B > 0) row_bytes = B;
  const int64_t ahead_end = std::max(j0, j1 - kPlaceAhead);
  int64_t j = j0;
  for (; j < ahead_end; ++j) {
    __builtin_prefetch(dst + next[ids[j + kPlaceAhead] - lo] * row_bytes, 1, 3);
    copy_row<B>(src, j, dst, next[ids[j] - lo]++, row_bytes);
  }
  for (; j < j1; ++j) copy_row<B>(src, j, dst, next[ids[j] - lo]++, row_bytes);
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
  if (num_rows == 0) {
    layout.offsets_.assign(1, 0);
    return layout;
  }
  const auto [lo, hi] = id_range(ids, num_rows, sort_slices(num_rows, copy));
  // Unsigned arithmetic: ids may span the whole int64 range.
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (span < static_cast<uint64_t>(2 * num_rows + 1024)) {
    layout.dense_ = true;
    layout.ids_ = ids;
    layout.lo_ = lo;
    layout.count_sort(num_rows, span, copy);
  } else {
    layout.stable_sort(ids, num_rows, copy);
  }
  layout.num_groups_ = static_cast<int64_t>(layout.offsets_.size()) - 1;
  return layout;
}

// Each slice counts its ids; one pass over the values turns the counts into
// each (value, slice)'s first position and numbers the groups; each slice
// then copies its rows to their positions, which keeps them in input order
// within a group. A row's group is found later through its id (row_keys),
// so no per-row group number is written.
void GroupLayout::count_sort(int64_t n, uint64_t span, const RowCopy& copy) {
  const int64_t* ids = ids_;
  const int64_t lo = lo_;
  const int slices = sort_slices(n, copy);
  const int64_t values = static_cast<int64_t>(span) + 1;
  std::vector<int64_t> start(slices * values, 0);
  group_of_value_.assign(values, -1);
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
      group_of_value_[v] = static_cast<int64_t>(offsets_.size());
      offsets_.push_back(first);
    }
  }
  offsets_.push_back(n);
  dispatch_row_bytes(copy.row_bytes, [&](auto row_bytes) {
    constexpr int64_t B = decltype(row_bytes)::value;
    for_each_slice(n, slices, [&](int s, int64_t j0, int64_t j1) {
      place_rows<B>(ids, lo, j0, j1, copy.src, copy.dst, copy.row_bytes, start.data() + s * values);
    });
  });
}

void GroupLayout::stable_sort(const int64_t* ids, int64_t n, const RowCopy& copy) {
  group_of_row_.resize(n);
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
  const int64_t n = num_rows();
  if (!csr_ || !rows_.empty() || n == 0) return;
  rows_.resize(n);
  std::vector<int64_t> next(offsets_.begin(), offsets_.end() - 1);
  const int64_t* keys = row_keys();
  const int64_t base = key_base();
  for (int64_t j = 0; j < n; ++j) rows_[next[group_of_key(keys[j] - base)]++] = j;
}

}  // namespace dara
