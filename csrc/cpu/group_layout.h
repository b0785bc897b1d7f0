// Which rows form each group (docs/spec.md#inputs): contiguous blocks of G
// rows, or the groups of a group_index, ordered by id, each holding its rows
// in input order (a stable counting sort).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace dara {

class GroupLayout {
 public:
  static GroupLayout contiguous(int64_t num_rows, int64_t group_size);
  static GroupLayout from_ids(const int64_t* ids, int64_t num_rows);

  int64_t num_groups() const { return num_groups_; }
  int64_t begin(int64_t g) const { return sorted() ? offsets_[g] : g * group_size_; }
  int64_t end(int64_t g) const { return sorted() ? offsets_[g + 1] : (g + 1) * group_size_; }
  // The input row at a position in group order.
  int64_t row(int64_t position) const { return sorted() ? rows_[position] : position; }
  // Whether the groups come from a group_index (their order may still equal
  // input order); rows() then lists the input rows in group order.
  bool sorted() const { return group_size_ == 0; }
  const int64_t* rows() const { return rows_.get(); }

 private:
  int64_t num_groups_ = 0;
  int64_t group_size_ = 0;           // contiguous groups; 0 for a group_index
  std::vector<int64_t> offsets_;     // [B + 1] first position of each group
  std::shared_ptr<int64_t[]> rows_;  // [N] input row at each position
};

}  // namespace dara
