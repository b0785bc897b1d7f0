// Which rows form each group: contiguous blocks of G rows, or a CSR built
// from an arbitrary group_index (a counting sort when ids are dense, a stable
// sort otherwise). Groups are ordered by id; rows keep their input order.
// A CSR layout also knows each row's group (through its key), so a pass in
// input order can read per-group values instead of scattering its writes.
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
  int64_t num_rows() const { return csr_ ? offsets_.back() : num_groups_ * group_size_; }
  int64_t begin(int64_t g) const { return csr_ ? offsets_[g] : g * group_size_; }
  int64_t end(int64_t g) const { return csr_ ? offsets_[g + 1] : (g + 1) * group_size_; }
  // The input row at a position in group order. A CSR layout needs
  // ensure_rows() first, called outside any parallel loop.
  int64_t row(int64_t position) const { return csr_ ? rows_[position] : position; }
  void ensure_rows() const;
  bool sorted() const { return csr_; }
  // Each input row's key, from which a pass in input order finds its group:
  // row_keys()[j] - key_base(), in [0, num_keys()). Dense ids are their own
  // keys (the id's offset from the smallest), so the sort writes no
  // per-row group numbers; sparse ids are keyed by their group.
  const int64_t* row_keys() const { return dense_ ? ids_ : group_of_row_.data(); }
  int64_t key_base() const { return dense_ ? lo_ : 0; }
  int64_t num_keys() const { return dense_ ? static_cast<int64_t>(group_of_value_.size()) : num_groups_; }
  // The group of a key, or -1 when no row has it (a dense id left out).
  int64_t group_of_key(int64_t key) const { return dense_ ? group_of_value_[key] : key; }

 private:
  void count_sort(int64_t n, uint64_t span, const RowCopy& copy);
  void stable_sort(const int64_t* ids, int64_t n, const RowCopy& copy);

  bool csr_ = false;
  int64_t num_groups_ = 0;
  int64_t group_size_ = 0;
  bool dense_ = false;
  const int64_t* ids_ = nullptr;  // the caller's, alive as long as the layout
  int64_t lo_ = 0;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> group_of_value_;  // dense ids: per value (id - lo)
  // Built only when a pass writes or reads per-row data in group order: the
  // common shuffled call (complete groups, no token weights) never does, and
  // the scatter that builds it costs as much as the sort's own.
  mutable std::vector<int64_t> rows_;
  std::vector<int64_t> group_of_row_;  // sparse ids only
};

}  // namespace dara
