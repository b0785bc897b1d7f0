// One response seen through its group's statistics: per-reward A_jk, the
// combined columns a_c that s_j sums, and whether the row is scorable and
// kept. Every compiled backend's accumulate and apply call this, so they
// agree on every row. Templated on the row's real type: group and batch sums
// stay double in the callers, the per-row arithmetic may run in float.
#pragma once
#include "group_math.h"
#include "host_device.h"
#include "wire.h"

namespace dara {

// A group's statistics as apply and the row pass read them.
template <typename Real>
struct GroupRefOf {
  const Real* mean;    // [K]
  const Real* scale;   // [K]
  const Real* weight;  // [K] DVAO w_gk, else nullptr
  Real sum_mean;       // GRPO summed column
  Real sum_scale;
};
using GroupRef = GroupRefOf<double>;

struct RowSignal {
  bool scorable;
  bool keep;
};

// GRPO's summed reward sum_k b_k r_k over the row's valid entries; *scorable
// says whether any entry is valid.
template <int KT, typename Real>
DARA_HD Real row_reward_sum(const Real* r, int K, const Options& o, const Real* base, bool* scorable) {
  if constexpr (KT > 0) K = KT;
  Real rsum = Real(0);
  bool any = false;
  for (int k = 0; k < K; ++k) {
    Real x;
    any |= read_reward(r[k], o, &x);
    rsum += base[k] * x;  // x is 0 for an entry that does not count
  }
  *scorable = any;
  return rsum;
}

// Which combined columns a row has. A caller that knows it at compile time
// passes it, so a loop over rows has no branch left and runs in SIMD lanes.
enum class Columns { kRuntime, kPerReward, kGroupWeighted, kSummed };

// r: the row's K raw rewards (NaN = missing).
template <int KT, typename Real, Columns M = Columns::kRuntime>
DARA_HD RowSignal row_signal(const Real* r, int K, const Options& o, const Real* base, const GroupRefOf<Real>& group,
                             Real* reward_a, Real* column_a) {
  if constexpr (KT > 0) K = KT;
  const bool summed = M == Columns::kRuntime ? o.combined_column() : M == Columns::kSummed;
  const bool weighted = M == Columns::kRuntime ? group.weight != nullptr : M == Columns::kGroupWeighted;
  bool scorable = false, positive = false, negative = false;
  for (int k = 0; k < K; ++k) {
    Real x;
    const bool valid = read_reward(r[k], o, &x);
    // A product with the 0/1 flag, not a branch: rows can run in SIMD lanes.
    const Real a = (x - group.mean[k]) * group.scale[k] * (valid ? Real(1) : Real(0));
    reward_a[k] = a;
    positive |= a > Real(0);
    negative |= a < Real(0);
  }
  const Real rsum = row_reward_sum<KT>(r, K, o, base, &scorable);
  if (summed) {
    column_a[0] = scorable ? (rsum - group.sum_mean) * group.sum_scale : Real(0);
  } else if (weighted) {
    for (int k = 0; k < K; ++k) column_a[k] = group.weight[k] * reward_a[k];
  } else {
    for (int k = 0; k < K; ++k) column_a[k] = reward_a[k];
  }
  return {scorable, !(o.drops_conflicts() & positive & negative)};
}

// The advantage apply writes: s_j = sum_c combine_c a_c, whitened by the
// batch affine map and the query scale; 0 for a dropped or unscorable row.
template <int CT, typename Real>
DARA_HD Real row_advantage(const RowSignal& rs, const Real* column_a, int C, const Real* combine, Real shift,
                           Real factor) {
  if constexpr (CT > 0) C = CT;
  Real s = Real(0);
  for (int c = 0; c < C; ++c) s += combine[c] * column_a[c];
  // A select, not a branch, so rows still run in SIMD lanes; not a product with
  // a 0/1 flag either, since factor is infinite when bn_eps = 0 and the batch
  // has no spread, and a dropped row must stay exactly 0.
  const Real value = (s - shift) * factor;
  return (rs.keep & rs.scorable) ? value : Real(0);
}

}  // namespace dara
