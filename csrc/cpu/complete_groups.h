// Complete groups (every entry present, no row dropped: the common case), a
// batch of groups at a time. Each group's rows are read once, into shifted
// moments: sums s_k and products P_ce of x = r - shift, with shift = the
// group's first row so nothing cancels beyond the spread, and under token
// batch normalisation the same sums weighted by L_j. Every per-group formula
// (means, square roots, scales, the deviation covariance the batch sums
// need) then runs as a loop over the batch's groups, which the compiler runs
// in SIMD lanes; the batch's values reach the chunk's sums in group order.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../core/group_math.h"
#include "../core/wire.h"
#include "chunk_sums.h"
#include "cpu_isa.h"
#include "group_layout.h"
#include "group_table.h"
#include "reward_count.h"
#include "thread_storage.h"

namespace dara {

// Rows per block of the per-row real type's partial sums before they reach
// the double group sums: float rounding over 32 terms stays below 2e-6.
constexpr int64_t kRowBlock = 32;

// Per-group doubles a batch holds at most (32 KiB, so it stays in the L1 or L2
// cache): K = 4 fits the largest batch, K = 64 one group.
constexpr int64_t kBatchDoubles = 4 << 10;
constexpr int64_t kMaxBatchGroups = 64;
// Per-reward work arrays (m, mean, scale, column, active, spread) and four single ones.
constexpr int kWorkPerReward = 6;
constexpr int kWorkSingles = 4;

// max(x, 0) with a NaN mapped to 0, as std::fmax does, but as a select the
// compiler can run in SIMD lanes (std::fmax is a library call).
inline double nonnegative(double x) { return x > 0.0 ? x : 0.0; }

// The sum of value(i) over [0, n) in four interleaved partial sums: four
// independent chains of additions instead of one, in a fixed order (same
// bits on every run). A value computed in the loop is never stored.
template <typename F>
inline double lane_sum_of(int64_t n, const F& value) {
  double part[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) part[j] += value(i + j);
  }
  for (; i < n; ++i) part[0] += value(i);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

inline double lane_sum(const double* v, int64_t n) {
  return lane_sum_of(n, [v](int64_t i) { return v[i]; });
}

// Zeroes the rows x cols corner of a matrix with row stride `stride`.
template <typename T>
inline void zero(T* m, int rows, int cols, int stride) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) m[r * stride + c] = T(0);
  }
}

// Rows [b0, b1) of K = 3 or 4 float rewards, two rows per 32-byte vector
// (one per 16-byte half, a K = 3 row padded with a zero). The square's upper
// triangle comes from three products per pair, x x, x rot1(x) and x rot2(x)
// (rotations within each half: x_k x_k+1 and x_k x_k+2 hold every pair
// c < e): a pair of rows costs a subtract, two in-lane shuffles and three
// multiply-adds, not K of each, and each sum has half as many dependent
// additions as with a row at a time. (The compiler's own vectorisation of
// the generic loop shuffles across lanes instead.) An odd last row is paired
// with the shift itself, which adds zeros. Sums and the square's upper
// triangle go to bs and bP (row stride K).
template <int K>
void paired_row_moments(const float* rewards, int64_t b0, int64_t b1, const float* shift, float* bs, float* bP) {
  static_assert(K == 3 || K == 4);
  typedef float v8 __attribute__((vector_size(32)));
  typedef int32_t i8 __attribute__((vector_size(32)));
  const float s3 = K == 4 ? shift[K - 1] : 0.0f;
  const v8 sh = {shift[0], shift[1], shift[2], s3, shift[0], shift[1], shift[2], s3};
  // A K = 3 pair is built from its six values: copying 12-byte rows into a
  // vector goes through the stack and stalls on store forwarding.
  auto load_pair = [](const float* r) {
    v8 x;
    if constexpr (K == 4) {
      std::memcpy(&x, r, sizeof(v8));
    } else {
      x = v8{r[0], r[1], r[2], 0.0f, r[3], r[4], r[5], 0.0f};
    }
    return x;
  };
  auto load_last = [&](const float* r) {
    v8 x = sh;
    if constexpr (K == 4) {
      std::memcpy(&x, r, sizeof(v8) / 2);
    } else {
      x = v8{r[0], r[1], r[2], 0.0f, shift[0], shift[1], shift[2], 0.0f};
    }
    return x;
  };
  v8 sum = {}, square = {}, next = {}, across = {};
  auto add = [&](v8 x) {
    x -= sh;
    sum += x;
    square += x * x;
    next += x * __builtin_shuffle(x, i8{1, 2, 3, 0, 5, 6, 7, 4});
    across += x * __builtin_shuffle(x, i8{2, 3, 0, 1, 6, 7, 4, 5});
  };
  int64_t row = b0;
  for (; row + 2 <= b1; row += 2) add(load_pair(rewards + row * K));
  if (row < b1) add(load_last(rewards + row * K));
  // The two rows' halves added (a copy of the folded value, not of an
  // accumulator, whose address taken would keep it in memory through the loop).
  typedef float v4 __attribute__((vector_size(16)));
  auto fold = [](v8 v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  };
  const v4 s = fold(sum), d = fold(square), n1 = fold(next), n2 = fold(across);
  for (int k = 0; k < K; ++k) {
    bs[k] = s[k];
    bP[k * K + k] = d[k];
  }
  bP[0 * K + 1] = n1[0];
  bP[1 * K + 2] = n1[1];
  bP[0 * K + 2] = n2[0];
  if constexpr (K == 4) {
    bP[2 * K + 3] = n1[2];
    bP[0 * K + 3] = n1[3];
    bP[1 * K + 3] = n2[1];
  }
}

// Sums over rows [b0, b1) of x = row - shift and of the square x x^T (its
// upper triangle at least; row stride N), in the per-row real type.
template <int KT, typename Real, typename scalar_t>
void block_moments(const scalar_t* rewards, int K, int64_t b0, int64_t b1, const Real* shift, Real* bs, Real* bP) {
  constexpr int N = local_size<KT>();
  if constexpr ((KT == 3 || KT == 4) && std::is_same_v<Real, float> && std::is_same_v<scalar_t, float>) {
    paired_row_moments<KT>(rewards, b0, b1, shift, bs, bP);
  } else {
    if constexpr (KT > 0) K = KT;
    zero(bs, 1, K, N);
    zero(bP, K, K, N);
    for (int64_t p = b0; p < b1; ++p) {
      Real x[N];
      for (int k = 0; k < K; ++k) x[k] = static_cast<Real>(rewards[p * K + k]) - shift[k];
      for (int c = 0; c < K; ++c) {
        bs[c] += x[c];
        for (int e = 0; e < K; ++e) bP[c * N + e] += x[c] * x[e];
      }
    }
  }
}

// Per group of a batch, the reciprocals of n_g and of the variance divisor,
// shared by all K rewards: division is the slowest step of FinishReward.
struct GroupReciprocals {
  static void run(int64_t B, const ColumnRule r, const double* __restrict n, double* __restrict inv_n,
                  double* __restrict inv_divisor) {
    for (int64_t i = 0; i < B; ++i) {
      inv_n[i] = 1.0 / n[i];
      inv_divisor[i] = 1.0 / variance_divisor(n[i], r);
    }
  }
};

// One reward's statistics in every group of a batch. The arrays never
// overlap (__restrict) and the rule is a value of doubles, so the compiler
// runs the loop in SIMD lanes (as a function of its own, see run_loop).
struct FinishReward {
  static void run(int64_t B, const ColumnRule r, double base, const double* __restrict n,
                  const double* __restrict inv_n, const double* __restrict inv_divisor, const double* __restrict shift,
                  const double* __restrict sum, const double* __restrict product, double* __restrict m,
                  double* __restrict mean, double* __restrict scale, double* __restrict active,
                  double* __restrict spread, double* __restrict energy, double* __restrict raw_sum) {
    for (int64_t i = 0; i < B; ++i) {
      m[i] = sum[i] * inv_n[i];
      const double dev = nonnegative(product[i] - sum[i] * m[i]);
      const double root_variance = column_spread(n[i], dev * inv_divisor[i]);
      const double std = column_std(n[i], root_variance, r);
      mean[i] = column_mean(n[i], shift[i] + m[i], r);
      active[i] = column_active(n[i], root_variance, r);
      scale[i] = column_scale(n[i], std, active[i], r);
      spread[i] = base * std;
      energy[i] = scale[i] * scale[i] * dev;
      raw_sum[i] = n[i] * shift[i] + sum[i];
    }
  }
};

template <int KT>
class CompleteBatch {
 public:
  CompleteBatch(int K, bool tokens)
      : K_(KT > 0 ? KT : K),
        pairs_(K_ * (K_ + 1) / 2),
        tokens_(tokens),
        slots_(3 * K_ + pairs_ + (tokens ? K_ + pairs_ + 1 : 0) + 1),
        capacity_(
            std::clamp<int64_t>(kBatchDoubles / (slots_ + kWorkPerReward * K_ + kWorkSingles), 1, kMaxBatchGroups)),
        moments_(thread_storage<double, kBatchMoments>((slots_ + kWorkPerReward * K_ + kWorkSingles) * capacity_)),
        work_(moments_ + slots_ * capacity_),
        groups_(thread_storage<int64_t, kBatchGroups>(capacity_)) {}

  bool full() const { return size_ == capacity_; }
  bool empty() const { return size_ == 0; }

  // Reads group g's rows [begin, end) (rewards in group order). Returns false,
  // keeping nothing, when the group holds a NaN or an infinite value (its
  // sums are then not finite), which the general path handles or reports.
  template <typename scalar_t>
  bool add(const scalar_t* rewards, const AccumulateArgs& a, int64_t g, int64_t begin, int64_t end) {
    using Real = row_real_t<scalar_t>;
    constexpr int N = local_size<KT>();
    const int K = K_;
    const int64_t i = size_;
    Real row_shift[N];
    for (int k = 0; k < K; ++k) row_shift[k] = static_cast<Real>(rewards[begin * K + k]);
    if (!tokens_ && end - begin <= kRowBlock) {
      // One block of rows (groups of up to 32 responses): its sums go
      // straight to the batch.
      Real bs[N], bP[N * N];
      block_moments<KT>(rewards, K, begin, end, row_shift, bs, bP);
      for (int k = 0; k < K; ++k) {
        if (!(bs[k] - bs[k] == Real(0))) return false;
      }
      store(i, g, end - begin, row_shift, bs, bP);
      return true;
    }
    double s[N], P[N * N], ts[N], tP[N * N];
    zero(s, 1, K, N);
    zero(P, K, K, N);
    zero(ts, 1, K, N);
    zero(tP, K, K, N);
    double tw = 0.0;
    for (int64_t b0 = begin; b0 < end; b0 += kRowBlock) {
      const int64_t b1 = std::min(end, b0 + kRowBlock);
      Real bs[N], bP[N * N];
      block_moments<KT>(rewards, K, b0, b1, row_shift, bs, bP);
      for (int c = 0; c < K; ++c) {
        s[c] += static_cast<double>(bs[c]);
        for (int e = c; e < K; ++e) P[c * N + e] += static_cast<double>(bP[c * N + e]);
      }
      if (!tokens_) continue;
      Real bts[N], btP[N * N], btw = Real(0);
      zero(bts, 1, K, N);
      zero(btP, K, K, N);
      for (int64_t p = b0; p < b1; ++p) {
        const Real w = static_cast<Real>(a.token_weights[a.layout->row(p)]);
        Real x[N];
        for (int k = 0; k < K; ++k) x[k] = static_cast<Real>(rewards[p * K + k]) - row_shift[k];
        btw += w;
        for (int c = 0; c < K; ++c) {
          bts[c] += w * x[c];
          for (int e = c; e < K; ++e) btP[c * N + e] += w * x[c] * x[e];
        }
      }
      tw += static_cast<double>(btw);
      for (int c = 0; c < K; ++c) {
        ts[c] += static_cast<double>(bts[c]);
        for (int e = c; e < K; ++e) tP[c * N + e] += static_cast<double>(btP[c * N + e]);
      }
    }
    for (int k = 0; k < K; ++k) {
      if (!(s[k] - s[k] == 0.0)) return false;
    }
    store(i, g, end - begin, row_shift, s, P);
    if (tokens_) {
      for (int k = 0; k < K; ++k) at(kTokenSum, k)[i] = ts[k];
      for (int c = 0, q = 0; c < K; ++c) {
        for (int e = c; e < K; ++e, ++q) at(kTokenProduct, q)[i] = tP[c * N + e];
      }
      at(kTokenTotal, 0)[i] = tw;
    }
    return true;
  }

  // The batch's groups into the table and the chunk's sums; empties the batch.
  void finish(const AccumulateArgs& a, GroupTable& table, ChunkSums<KT>& sums) {
    const int K = K_;
    const int64_t B = size_;
    const Options o = *a.options;  // a local copy: the stores below cannot alias it
    const double* n = at(kRows, 0);
    double* m = work(0);                // [K] s_k / n: the mean's offset from the shift
    double* mean = work(K);             // [K] mu_gk
    double* scale = work(2 * K);        // [K]
    double* column = work(3 * K);       // [K] the per-reward column's factor on x, or b_k
    double* active = work(4 * K);       // [K]
    double* spread = work(5 * K);       // [K] b_k sigma_gk (DVAO)
    double* value = work(6 * K);        // [1] scratch, one value per group
    double* energy = work(6 * K + 1);   // [1] one reward at a time
    double* raw_sum = work(6 * K + 2);  // [1] one reward at a time
    double* inv_n = work(6 * K + 3);    // [1]
    double* inv_divisor = value;        // [1] until the covariances below reuse it
    const double rows = lane_sum(n, B);
    const ColumnRule rule = column_rule(o);
    run_loop<GroupReciprocals>(B, rule, n, inv_n, inv_divisor);
    for (int k = 0; k < K; ++k) {
      const int64_t w = k * capacity_;
      run_loop<FinishReward>(B, rule, a.base[k], n, static_cast<const double*>(inv_n),
                             static_cast<const double*>(inv_divisor), static_cast<const double*>(at(kShift, k)),
                             static_cast<const double*>(at(kSum, k)),
                             static_cast<const double*>(at(kProduct, pair(k, k))), m + w, mean + w, scale + w,
                             active + w, spread + w, energy, raw_sum);
      sums.active[k] += lane_sum(active + w, B);
      sums.count[k] += rows;
      sums.sum[k] += lane_sum(raw_sum, B);
      sums.energy[k] += lane_sum(energy, B);
    }
    for (int64_t i = 0; i < B; ++i) {
      double* group_mean = table.mean + groups_[i] * K;
      double* group_scale = table.scale + groups_[i] * K;
      for (int k = 0; k < K; ++k) {
        group_mean[k] = mean[k * capacity_ + i];
        group_scale[k] = scale[k * capacity_ + i];
      }
      table.complete[groups_[i]] = 1;
    }
    sums.groups += static_cast<double>(B);
    sums.rows += rows;
    if (tokens_) sums.token_total += lane_sum(at(kTokenTotal, 0), B);
    if (o.group_weighted()) group_weights(table, sums);
    if (o.combined_column()) {
      summed_column(a, o, table, sums);
    } else {
      for (int k = 0; k < K; ++k) {
        double* ck = column + k * capacity_;
        const double* wk = o.group_weighted() ? spread + k * capacity_ : nullptr;
        for (int64_t i = 0; i < B; ++i) ck[i] = scale[k * capacity_ + i] * (wk ? wk[i] : 1.0);
      }
      for (int c = 0; c < K; ++c) {
        for (int e = c; e < K; ++e) {
          sums.cross[c * K + e] += lane_sum_of(B, covariance_of(c, e, column + c * capacity_, column + e * capacity_));
          if (!tokens_) continue;
          token_covariance(c, e, column + c * capacity_, column + e * capacity_, value);
          sums.token_cross[c * K + e] += lane_sum(value, B);
        }
        if (!tokens_) continue;
        token_deviation(c, column + c * capacity_, value);
        sums.token_signal[c] += lane_sum(value, B);
      }
    }
    size_ = 0;
  }

 private:
  enum Slot { kShift, kSum, kProduct, kTokenSum, kTokenProduct, kTokenTotal, kRows };

  // Group g's rows, shift and sums (s and the upper triangle of P, row stride
  // N) as batch entry i.
  template <typename Real, typename Sum>
  void store(int64_t i, int64_t g, int64_t rows, const Real* row_shift, const Sum* s, const Sum* P) {
    constexpr int N = local_size<KT>();
    const int K = K_;
    double* shift = at(kShift, 0) + i;
    double* sum = at(kSum, 0) + i;
    double* product = at(kProduct, 0) + i;
    for (int k = 0; k < K; ++k) {
      shift[k * capacity_] = static_cast<double>(row_shift[k]);
      sum[k * capacity_] = static_cast<double>(s[k]);
    }
    for (int c = 0, q = 0; c < K; ++c) {
      for (int e = c; e < K; ++e, ++q) product[q * capacity_] = static_cast<double>(P[c * N + e]);
    }
    at(kRows, 0)[i] = static_cast<double>(rows);
    groups_[i] = g;
    ++size_;
  }

  int64_t offset(Slot slot) const {
    const int64_t token_slots = tokens_ ? K_ + pairs_ + 1 : 0;
    switch (slot) {
      case kShift:
        return 0;
      case kSum:
        return K_;
      case kProduct:
        return 2 * K_;
      case kTokenSum:
        return 2 * K_ + pairs_;
      case kTokenProduct:
        return 3 * K_ + pairs_;
      case kTokenTotal:
        return 3 * K_ + 2 * pairs_;
      case kRows:
        return 2 * K_ + pairs_ + token_slots;
    }
    return 0;
  }
  double* at(Slot slot, int index) { return moments_ + (offset(slot) + index) * capacity_; }
  double* work(int slot) { return work_ + slot * capacity_; }
  int pair(int c, int e) const {  // upper-triangle index of (c, e)
    if (c > e) std::swap(c, e);
    return c * K_ - c * (c - 1) / 2 + (e - c);
  }

  // i -> u_i v_i cov_ce, the deviation covariance of rewards c and e.
  auto covariance_of(int c, int e, const double* u, const double* v) {
    if (c > e) std::swap(c, e);
    const double *sc = at(kSum, c), *pce = at(kProduct, pair(c, e)), *me = work(0) + e * capacity_;
    const bool diagonal = c == e;
    return [=](int64_t i) {
      const double cov = pce[i] - sc[i] * me[i];
      return u[i] * v[i] * (diagonal ? nonnegative(cov) : cov);
    };
  }

  // The same with each row weighted by L_j.
  void token_covariance(int c, int e, const double* u, const double* v, double* value) {
    const double *tsc = at(kTokenSum, c), *tse = at(kTokenSum, e), *tpce = at(kTokenProduct, pair(c, e));
    const double *tw = at(kTokenTotal, 0), *mc = work(0) + c * capacity_, *me = work(0) + e * capacity_;
    for (int64_t i = 0; i < size_; ++i) {
      const double cov = tpce[i] - mc[i] * tse[i] - me[i] * tsc[i] + tw[i] * mc[i] * me[i];
      value[i] = u[i] * v[i] * cov;
    }
  }

  // value_i = u_i sum_j L_j (r_jc - mu_gc).
  void token_deviation(int c, const double* u, double* value) {
    const double *tsc = at(kTokenSum, c), *tw = at(kTokenTotal, 0), *mc = work(0) + c * capacity_;
    for (int64_t i = 0; i < size_; ++i) value[i] = u[i] * (tsc[i] - tw[i] * mc[i]);
  }

  // DVAO: w_gk = b_k sigma_gk / sum_k b_k sigma_gk, in place of the spreads.
  void group_weights(GroupTable& table, ChunkSums<KT>& sums) {
    const int K = K_;
    double* spread = work(5 * K);
    double* total = work(6 * K + 1);
    for (int64_t i = 0; i < size_; ++i) total[i] = 0.0;
    for (int k = 0; k < K; ++k) {
      for (int64_t i = 0; i < size_; ++i) total[i] += spread[k * capacity_ + i];
    }
    for (int k = 0; k < K; ++k) {
      double* wk = spread + k * capacity_;
      for (int64_t i = 0; i < size_; ++i) wk[i] = total[i] != 0.0 ? wk[i] / total[i] : 0.0;
    }
    for (int k = 0; k < K; ++k) {
      for (int64_t i = 0; i < size_; ++i) table.weight[groups_[i] * K + k] = spread[k * capacity_ + i];
      sums.group_weight[k] += lane_sum(spread + k * capacity_, size_);
    }
  }

  // GRPO: the summed reward sum_k b_k r_k as the one column.
  void summed_column(const AccumulateArgs& a, const Options& o, GroupTable& table, ChunkSums<KT>& sums) {
    const int K = K_;
    const double* n = at(kRows, 0);
    double* base = work(3 * K);
    double* value = work(6 * K);
    double* dev = work(6 * K + 1);
    double* tdev = work(6 * K + 2);
    double* tsum = work(6 * K + 3);
    for (int k = 0; k < K; ++k) {
      for (int64_t i = 0; i < size_; ++i) base[k * capacity_ + i] = a.base[k];
    }
    for (int64_t i = 0; i < size_; ++i) dev[i] = tdev[i] = tsum[i] = 0.0;
    for (int c = 0; c < K; ++c) {
      for (int e = 0; e < K; ++e) {
        const auto covariance = covariance_of(c, e, base + c * capacity_, base + e * capacity_);
        for (int64_t i = 0; i < size_; ++i) dev[i] += covariance(i);
        if (!tokens_) continue;
        token_covariance(c, e, base + c * capacity_, base + e * capacity_, value);
        for (int64_t i = 0; i < size_; ++i) tdev[i] += value[i];
      }
      if (!tokens_) continue;
      token_deviation(c, base + c * capacity_, value);
      for (int64_t i = 0; i < size_; ++i) tsum[i] += value[i];
    }
    for (int64_t i = 0; i < size_; ++i) {
      double sum_mean = 0.0;
      for (int k = 0; k < K; ++k) sum_mean += a.base[k] * (at(kShift, k)[i] + work(0)[k * capacity_ + i]);
      const ColumnStats st = finish_column(n[i], sum_mean, nonnegative(dev[i]), o);
      table.sum_mean[groups_[i]] = st.mean;
      table.sum_scale[groups_[i]] = st.scale;
      dev[i] *= st.scale * st.scale;
      tsum[i] *= st.scale;
      tdev[i] *= st.scale * st.scale;
    }
    sums.cross[0] += lane_sum(dev, size_);
    sums.token_signal[0] += lane_sum(tsum, size_);
    sums.token_cross[0] += lane_sum(tdev, size_);
  }

  int K_, pairs_;
  bool tokens_;
  int64_t slots_, capacity_;
  double *moments_, *work_;
  int64_t* groups_;
  int64_t size_ = 0;
};

}  // namespace dara
