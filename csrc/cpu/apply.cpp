#include "apply.h"

#include "../core/row_signal.h"
#include "chunks.h"
#include "dispatch.h"

namespace dara {
namespace {

// Group g's rows (positions [begin, end) of the group-ordered rewards).
template <int KT, Columns M, typename scalar_t>
void apply_group(const GroupedBatch& a, const AccumulatorLayout& L, const GroupTable& table, const ApplyArgs& args,
                 const scalar_t* rewards, int64_t g, const CpuApplyOutputs& out) {
  constexpr int CT = column_count<KT, M>();
  const GroupLayout& layout = *a.layout;
  const Options& o = *a.options;
  const int K = KT > 0 ? KT : L.K;
  double row[cpu_rewards<KT>()], reward_a[cpu_rewards<KT>()], column_a[cpu_columns<CT>()];
  const GroupRefOf<double> group = group_ref(table, g, K, o);
  const double kappa = table.kappa[g];
  const double factor = (o.apply_query_scale ? kappa : 1.0) * args.scale;
  const unsigned signal = table.signal[g];
  const bool any = signal & kAnyActive, sum = signal & kSumActive, zeroed = signal & kZeroed;
  for (int64_t p = layout.begin(g); p < layout.end(g); ++p) {
    const RowSignal rs =
        row_signal<KT, M>(load_row<KT>(rewards, p, K, o, row), K, o, a.base, group, reward_a, column_a);
    const double value = row_advantage<CT>(rs, column_a, L.C, args.combine, args.shift, factor);
    out.advantages[p * out.stride] = zeroed ? 0.0f : static_cast<float>(value);
    out.keep[p] = rs.keep;
    out.query_scale[p * out.stride] = static_cast<float>(kappa);
    out.informative[p] = any;
    out.sum_informative[p] = sum;
  }
}

}  // namespace

void apply(const GroupedBatch& a, const AccumulatorLayout& L, const GroupTable& table, const ApplyArgs& args,
           const CpuApplyOutputs& out) {
  const GroupLayout& layout = *a.layout;
  const int64_t groups = layout.num_groups();
  const int64_t rows = groups > 0 ? layout.end(groups - 1) : 0;
  dispatch_rows(a.rewards, *a.options, [&](auto kt, auto mode, const auto* rewards) {
    constexpr int KT = decltype(kt)::value;
    constexpr Columns M = decltype(mode)::value;
    for_each_chunk(groups, kGroupsPerChunk, rows * (L.K * 8 + 11), [&](int64_t, int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) apply_group<KT, M>(a, L, table, args, rewards, g, out);
    });
  });
}

void to_input_order(const CpuApplyOutputs& grouped, const int64_t* positions, int64_t n, const CpuApplyOutputs& out) {
  // A row moves its position and 21 bytes of outputs (read and written).
  at::parallel_for(0, n, kBytesPerThread / 29, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t p = positions[j];
      out.advantages[j] = grouped.advantages[p * grouped.stride];
      out.keep[j] = grouped.keep[p];
      out.query_scale[j] = grouped.query_scale[p * grouped.stride];
      out.informative[j] = grouped.informative[p];
      out.sum_informative[j] = grouped.sum_informative[p];
    }
  });
}

}  // namespace dara
