// Per-group formulas (docs/spec.md#group-statistics, #normalised-advantage),
// shared by the CPU and CUDA kernels. Group statistics come from double sums
// and stay double; a row's reward may be read in a narrower type.
#pragma once
#include <cmath>

#include "generated_tables.h"
#include "host_device.h"

namespace dara {

struct ColumnStats {
  double mean;    // mu_gk (0 for a verl singleton)
  double std;     // sigma_gk (0 when n_gk < 2, 1 for a verl singleton)
  double scale;   // A_jk = (r_jk - mean) * scale; 0 for an inactive pair
  double active;  // 1 for an active pair, else 0: a number, since it is summed
};

// From the valid entries' count, mean and sum of squared deviations.
DARA_HD ColumnStats finish_column(double count, double mean, double sum_sq_dev, const Options& o) {
  const double divisor = o.unbiased ? count - 1.0 : count;
  const double spread = count >= 2.0 ? sqrt(sum_sq_dev / divisor) : 0.0;
  const bool single = o.singleton_verl && count == 1.0;
  ColumnStats s;
  s.active = count >= 2.0 && spread > o.active_tol ? 1.0 : 0.0;
  s.mean = single ? 0.0 : mean;
  s.std = single ? 1.0 : spread;
  s.scale = s.active != 0.0 || single ? (o.scale_by_std ? 1.0 / (s.std + o.eps) : 1.0) : 0.0;
  return s;
}

// A group's signal (docs/spec.md#group-signal), as bits: some reward is
// active; the weighted summed reward varies; and whether no_signal="zero"
// takes the group out (GRPO's own signal is its summed reward).
enum GroupSignal : unsigned { kAnyActive = 1u, kSumActive = 2u, kZeroed = 4u };

DARA_HD unsigned group_signal(bool any_active, bool sum_active, const Options& o) {
  const bool signal = o.summed_reward() ? sum_active : any_active;
  return (any_active ? kAnyActive : 0u) | (sum_active ? kSumActive : 0u) | (o.no_signal_zero && !signal ? kZeroed : 0u);
}

// The group's signal counts into the batch accumulators.
DARA_HD void add_group_signal(unsigned signal, const AccumulatorLayout& L, double* acc) {
  const bool any = signal & kAnyActive, sum = signal & kSumActive;
  acc[L.informative_groups()] += any ? 1.0 : 0.0;
  acc[L.sum_informative_groups()] += sum ? 1.0 : 0.0;
  acc[L.conflict_groups()] += any && !sum ? 1.0 : 0.0;
}

// +-Inf: a number whose difference with itself is not 0 (NaN is no number).
template <typename Real>
DARA_HD bool is_infinite(Real r) {
  return r == r && !(r - r == Real(0));
}

// reward_gates (docs/spec.md#reward-gates): a reward counts only where its
// gate passes (> 0). A failing gate makes a present entry 0 and a missing
// gate (NaN) makes it missing; a missing entry stays missing, and an infinite
// one infinite, so it is still counted as the error it is.
template <typename Real>
DARA_HD Real gated_reward(Real r, Real gate) {
  return gate > Real(0) || is_infinite(r) ? r : (gate == gate ? r - r : gate);
}

// One row's K rewards as loaded, gated in place: each gate reads its column
// as loaded, since no gate is itself gated (wire.INDEXED_COLUMNS). For a
// compile-time K the gate column is selected, not indexed, so that the row
// stays in registers on the GPU (an array indexed by a runtime value lives
// in local memory).
template <int KT, typename Real>
DARA_HD void gate_row(Real* r, int K, const Options& o) {
  if (!o.gated) return;
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) {
    const int a = o.gate[k];
    if (a == kNoGate) continue;
    Real gate = r[0];
    if constexpr (KT > 0) {
      for (int c = 1; c < KT; ++c) gate = a == c ? r[c] : gate;
    } else {
      gate = r[a];
    }
    r[k] = gated_reward(r[k], gate);
  }
}

// A reward as the formulas see it: *x is r, or 0 for a NaN (missing) entry;
// returns whether the entry counts (present, or NaN scored as 0 under
// nan_policy "zero").
template <typename Real>
DARA_HD bool read_reward(Real r, const Options& o, Real* x) {
  const bool present = r == r;
  *x = present ? r : Real(0);
  return present || o.nan_to_zero;
}

// The reward, NaN when it does not count.
template <typename Real>
DARA_HD Real clean_reward(Real r, const Options& o) {
  Real x;
  return read_reward(r, o, &x) ? x : r;
}

// First pass of a group's statistics: one row's valid entries into the
// group's count and sum (double).
template <int KT, typename Real>
DARA_HD void add_row_sums(const Real* r, int K, const Options& o, double* count, double* sum) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) {
    Real x;
    const bool valid = read_reward(r[k], o, &x);
    count[k] += valid ? 1.0 : 0.0;
    sum[k] += valid ? static_cast<double>(x) : 0.0;
  }
}

// Second pass: one row's squared deviations from the group mean, in double:
// a mean far from zero relative to the spread then costs no precision.
template <int KT, typename Real>
DARA_HD void add_row_deviations(const Real* r, int K, const Options& o, const double* mean, double* dev) {
  if constexpr (KT > 0) K = KT;
  for (int k = 0; k < K; ++k) {
    Real x;
    const bool valid = read_reward(r[k], o, &x);
    const double d = static_cast<double>(x) - mean[k];
    dev[k] += valid ? d * d : 0.0;
  }
}

}  // namespace dara
