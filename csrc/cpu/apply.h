// Apply: the second and last read of the rewards; writes each response's
// advantage, keep flag and query scale once.
#pragma once
#include <vector>

#include "../core/options.h"
#include "chunks.h"
#include "group_layout.h"
#include "group_table.h"
#include "row_signal.h"

namespace dara {

struct ApplyArgs {
  int K;
  int C;
  const Options* options;
  const double* base;
  const double* combine;  // [C] from finalize
  double shift;
  double scale;
  const GroupLayout* layout;
};

template <typename scalar_t>
void apply(const scalar_t* rewards, const ApplyArgs& a, const GroupTable& table, float* advantages,
           bool* keep, float* query_scale) {
  const Options& o = *a.options;
  const GroupLayout& layout = *a.layout;
  for_each_chunk(layout.num_groups(), [&](int64_t, int64_t g0, int64_t g1) {
    std::vector<double> scratch(a.K + a.C);
    double* reward_a = scratch.data();
    double* column_a = scratch.data() + a.K;
    for (int64_t g = g0; g < g1; ++g) {
      const GroupRef group = table.ref(g);
      const double kappa = table.kappa[g];
      for (int64_t p = layout.begin(g); p < layout.end(g); ++p) {
        const int64_t j = layout.row(p);
        RowSignal rs = row_signal(rewards + j * a.K, a.K, o, a.base, group, reward_a, column_a);
        double s = 0.0;
        for (int c = 0; c < a.C; ++c) s += a.combine[c] * column_a[c];
        double value = (rs.keep && rs.scorable) ? (s - a.shift) * a.scale : 0.0;
        if (o.apply_query_scale) value *= kappa;
        advantages[j] = static_cast<float>(value);
        keep[j] = rs.keep;
        query_scale[j] = static_cast<float>(kappa);
      }
    }
  });
}

}  // namespace dara
