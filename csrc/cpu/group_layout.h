// Which rows form each group: contiguous blocks of G rows, or a CSR built
// from an arbitrary group_index (a counting sort when ids are dense, a stable
// sort otherwise). Groups are ordered by id; rows keep their input order.
// A CSR layout also knows each row's group, so a pass in input order can
// read per-group values instead of scattering its writes.
#pragma once
#include <cstdint>
#include <vector>

namespace dara {

// Rows of a [N, row_bytes] array copied into group order while the layout is
// built: the sort's scatter is then the only random access the rows see.
struct RowCopy {
  const char* src;
  int64_t row_bytes;
  char* dst;
};

class GroupLayout {
 public:
  static GroupLayout contiguous(int64_t num_rows, int64_t group_size);
  static GroupLayout from_ids(const int64_t* ids, int64_t num_rows, const RowCopy& copy);

  int64_t num_groups() const { return num_groups_; }
  int64_t num_rows() const { return csr_ ? static_cast<int64_t>(group_of_row_.size()) : num_groups_ * group_size_; }
  int64_t begin(int64_t g) const { return csr_ ? offsets_[g] : g * group_size_; }
  int64_t end(int64_t g) const { return csr_ ? offsets_[g + 1] : (g + 1) * group_size_; }
  // The input row at a position in group order. A CSR layout needs
  // ensure_rows() first, called outside any parallel loop.
  int64_t row(int64_t position) const { return csr_ ? rows_[position] : position; }
  void ensure_rows() const;
  bool sorted() const { return csr_; }
  // Input row j's group (CSR layouts only).
  const int64_t* group_of_row() const { return group_of_row_.data(); }

 private:
  void count_sort(const int64_t* ids, int64_t lo, uint64_t span, const RowCopy& copy);
  void stable_sort(const int64_t* ids, const RowCopy& copy);

  bool csr_ = false;
  int64_t num_groups_ = 0;
  int64_t group_size_ = 0;
  std::vector<int64_t> offsets_;
  // Built only when a pass writes or reads per-row data in group order: the
  // common shuffled call (complete groups, no token weights) never does, and
  // the scatter that builds it costs as much as the sort's own.
  mutable std::vector<int64_t> rows_;
  std::vector<int64_t> group_of_row_;
};

}  // namespace dara
