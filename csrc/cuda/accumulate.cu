// Accumulate (launch 1): one warp per group, walking groups with a grid
// stride. Each warp adds its groups into its own shared-memory accumulators;
// blocks write partials; the last block to finish sums them in block order
// (deterministic) and runs finalize, so the op needs no host round trip.
#include <cmath>

#include "../core/finalize.h"
#include "../core/generated_tables.h"
#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "device_common.cuh"
#include "launch.h"

namespace dara {
namespace cuda {
namespace {

// Group statistics come from double sums, with each row's deviations taken
// from the double mean (group_math.h): a reward far from zero relative to its
// spread loses nothing. The row formulas run in the row type (float, or
// double for float64 rewards); their products and sums into the batch
// accumulators in double, where a product of two floats is exact. Summed in
// float, a batch whose rows all have one s_j != 0 (so no spread) came out
// with a batch std of 6e-4 instead of 0, and advantages 8e-2 off under
// response normalisation (whose factor is then 1 / bn_eps), measured on a
// host emulation of this kernel.

// A row's cross products a_c a_d are summed as their upper triangle.
template <int KT>
constexpr int max_cross() {
  return cuda_columns<KT>() * (cuda_columns<KT>() + 1) / 2;
}

// w a_c and w a_c a_d (d >= c) into a lane's sums.
template <typename Real>
__device__ __forceinline__ void add_columns(const Real* column_a, int C, double w, double* signal, double* cross) {
  for (int c = 0, at = 0; c < C; ++c) {
    const double a = column_a[c];
    signal[c] += w * a;
    for (int d = c; d < C; ++d, ++at) cross[at] += w * a * column_a[d];
  }
}

// The warp's column sums into acc's signal segment and its whole C x C cross
// matrix (both triangles), by lane 0.
__device__ void add_column_sums(const double* signal, const double* cross, int C, int lane, double* acc_signal,
                                double* acc_cross) {
  for (int c = 0, at = 0; c < C; ++c) {
    const double s = warp_sum(signal[c]);
    if (lane == 0) acc_signal[c] += s;
    for (int d = c; d < C; ++d, ++at) {
      const double x = warp_sum(cross[at]);
      if (lane == 0) {
        acc_cross[c * C + d] += x;
        if (d != c) acc_cross[d * C + c] += x;
      }
    }
  }
}

// The group's +-Inf entries, in the columns whose sum of valid entries is not
// finite (only an infinite entry, or an overflow, makes it so).
template <int KT, typename Real>
__device__ double infinite_entries(const CudaProblem& p, int64_t begin, int64_t end, int lane, const double* sum) {
  const int K = KT > 0 ? KT : p.K;
  Real r[cuda_rewards<KT>()];
  double found = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    for (int k = 0; k < K; ++k) found += !(sum[k] - sum[k] == 0.0) && is_infinite(r[k]) ? 1.0 : 0.0;
  }
  return warp_sum(found);
}

template <int KT, typename Real>
__device__ void accumulate_group(const CudaProblem& p, const Table& t, const double* base, int64_t g, int lane,
                                 double* acc, double* extrema, const AccumulatorLayout& L) {
  constexpr int N = cuda_rewards<KT>();
  const int K = KT > 0 ? KT : p.K;
  const int C = L.C;
  const Options& o = p.options;
  const bool raw_stats = o.raw_extremes();
  int64_t begin, end;
  group_range(p, g, begin, end);

  // Pass 1: each reward's valid entries (count, sum), the weighted summed
  // reward (GRPO's column, every method's signal test), SAW's and SA-MRPO's
  // raw sums of squares and extremes.
  double count[N], sum[N], sum_sq[N];
  Real r[N], hi[N], lo[N];
  for (int k = 0; k < K; ++k) {
    count[k] = sum[k] = sum_sq[k] = 0.0;
    hi[k] = lo[k] = -INFINITY;
  }
  double sum_count = 0.0, sum_total = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    add_row_sums<KT>(r, K, o, count, sum);
    bool scorable;
    const double rsum = row_reward_sum<KT>(r, K, o, base, &scorable);
    sum_count += scorable ? 1.0 : 0.0;
    sum_total += scorable ? rsum : 0.0;
    if (!raw_stats) continue;
    for (int k = 0; k < K; ++k) {
      const Real x = clean_reward(r[k], o);
      if (!(x == x)) continue;
      sum_sq[k] += static_cast<double>(x) * static_cast<double>(x);
      hi[k] = fmax(hi[k], x);
      lo[k] = fmax(lo[k], -x);
    }
  }
  double mean[N], entries = 0.0;
  bool finite = true;
  for (int k = 0; k < K; ++k) {
    count[k] = warp_sum(count[k]);
    sum[k] = warp_sum(sum[k]);
    mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
    entries += count[k];
    finite &= sum[k] - sum[k] == 0.0;
    if (raw_stats) {
      sum_sq[k] = warp_sum(sum_sq[k]);
      hi[k] = warp_max(hi[k]);
      lo[k] = warp_max(lo[k]);
    }
  }
  sum_count = warp_sum(sum_count);
  sum_total = warp_sum(sum_total);
  const double sum_mean = sum_count > 0.0 ? sum_total / sum_count : 0.0;
  // Warp-uniform: the sums are the warp's.
  const double infinite = finite ? 0.0 : infinite_entries<KT, Real>(p, begin, end, lane, sum);

  // Pass 2: squared deviations from the double means.
  double dev[N], sum_dev = 0.0;
  for (int k = 0; k < K; ++k) dev[k] = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    add_row_deviations<KT>(r, K, o, mean, dev);
    bool scorable;
    const double d = row_reward_sum<KT>(r, K, o, base, &scorable) - sum_mean;
    sum_dev += scorable ? d * d : 0.0;
  }
  sum_dev = warp_sum(sum_dev);

  double group_mean[N], spread[N];  // spread: b_k sigma_gk, DVAO's unnormalised group weight
  Real scale[N], weight[N];
  double spread_total = 0.0;
  bool any_active = false;
  for (int k = 0; k < K; ++k) {
    const ColumnStats s = finish_column(count[k], mean[k], warp_sum(dev[k]), o);
    any_active |= s.active != 0.0;
    group_mean[k] = s.mean;
    scale[k] = static_cast<Real>(s.scale);
    spread[k] = base[k] * s.std;
    spread_total += spread[k];
    if (lane == 0) {
      acc[L.active(k)] += s.active;
      acc[L.raw_count(k)] += count[k];
      acc[L.raw_sum(k)] += sum[k];
      acc[L.raw_sum_sq(k)] += sum_sq[k];
      extrema[L.max_reward(k)] = fmax(extrema[L.max_reward(k)], static_cast<double>(hi[k]));
      extrema[L.max_negated_reward(k)] = fmax(extrema[L.max_negated_reward(k)], static_cast<double>(lo[k]));
      t.mean[g * K + k] = s.mean;
      t.scale[g * K + k] = s.scale;
    }
  }
  for (int k = 0; k < K; ++k) {
    const double w = spread_total != 0.0 ? spread[k] / spread_total : 0.0;
    weight[k] = static_cast<Real>(w);
    if (o.group_weighted() && lane == 0) {
      acc[L.group_weight(k)] += w;
      t.weight[g * K + k] = w;
    }
  }
  GroupRefOf<Real> group{group_mean, scale, o.group_weighted() ? weight : nullptr, 0.0, Real(0)};
  const ColumnStats summed = finish_column(sum_count, sum_mean, sum_dev, o);
  if (o.summed_reward()) {
    group.sum_mean = summed.mean;
    group.sum_scale = static_cast<Real>(summed.scale);
    if (lane == 0) {
      t.sum_mean[g] = summed.mean;
      t.sum_scale[g] = summed.scale;
    }
  }
  const unsigned group_bits = group_signal(any_active, summed.active != 0.0, o);
  // A group that no_signal="zero" takes out adds no row to the batch statistics.
  const bool counted = !(group_bits & kZeroed);
  if (lane == 0) {
    t.signal[g] = static_cast<uint8_t>(group_bits);
    add_group_signal(group_bits, L, acc);
  }

  // Pass 3: each row's A_jk and combined columns (row_signal, as apply).
  constexpr int NC = cuda_columns<KT>(), NX = max_cross<KT>();
  Real reward_a[N], column_a[NC];
  double energy[N], signal[NC], token_signal[NC], cross[NX], token_cross[NX];
  for (int k = 0; k < K; ++k) energy[k] = 0.0;
  for (int c = 0; c < C; ++c) signal[c] = token_signal[c] = 0.0;
  for (int c = 0; c < C * (C + 1) / 2; ++c) cross[c] = token_cross[c] = 0.0;
  int kept = 0, rows = 0;
  double token_total = 0.0;
  const bool token = p.token_weights != nullptr;
  for (int64_t i = begin + lane; i < end; i += 32) {
    const int64_t j = row_at(p, i);
    load_row<KT>(p, j, K, r);
    const RowSignal rs = row_signal<KT>(r, K, o, base, group, reward_a, column_a);
    for (int k = 0; k < K; ++k) energy[k] += static_cast<double>(reward_a[k]) * reward_a[k];
    kept += rs.keep ? 1 : 0;
    if (!(rs.keep && rs.scorable && counted)) continue;
    rows += 1;
    add_columns(column_a, C, 1.0, signal, cross);
    if (!token) continue;
    const double w = p.token_weights[j];
    token_total += w;
    add_columns(column_a, C, w, token_signal, token_cross);
  }
  for (int k = 0; k < K; ++k) {
    const double e = warp_sum(energy[k]);
    if (lane == 0) acc[L.energy(k)] += e;
  }
  add_column_sums(signal, cross, C, lane, acc + L.signal(0), acc + L.cross(0, 0));
  if (token) add_column_sums(token_signal, token_cross, C, lane, acc + L.token_signal(0), acc + L.token_cross(0, 0));
  kept = warp_sum(kept);
  rows = warp_sum(rows);
  token_total = warp_sum(token_total);
  if (lane == 0) {
    acc[L.groups()] += 1.0;
    acc[L.rows()] += rows;
    acc[L.token_total()] += token_total;
    acc[L.infinite_rewards()] += infinite;
    acc[L.missing_rewards()] += static_cast<double>((end - begin) * K) - entries;
    t.kappa[g] = static_cast<double>(kept) / static_cast<double>(end - begin);
  }
}

template <int KT, typename Real>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kAccumulateBlocksPerMultiprocessor)
    accumulate_kernel(CudaProblem p, Table t, Reduction red, Results out) {
  DARA_DYNAMIC_SHARED(double, shared);
  const AccumulatorLayout L{p.K, p.C};
  const int M = L.size(), E = L.extrema_size();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double* acc = shared + warp * (M + E);
  double* extrema = acc + M;
  for (int i = lane; i < M; i += 32) acc[i] = 0.0;
  for (int i = lane; i < E; i += 32) extrema[i] = -INFINITY;
  __syncwarp();

  double base[cuda_rewards<KT>()];
  load_base<KT>(p, base);
  const int64_t groups = group_count(p);
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * warps + warp; g < groups;
       g += static_cast<int64_t>(gridDim.x) * warps) {
    accumulate_group<KT, Real>(p, t, base, g, lane, acc, extrema, L);
    __syncwarp();
  }
  __syncthreads();

  for (int i = threadIdx.x; i < M; i += blockDim.x) {
    double s = 0.0;
    for (int w = 0; w < warps; ++w) s += shared[w * (M + E) + i];
    red.partial[static_cast<int64_t>(blockIdx.x) * M + i] = s;
  }
  for (int i = threadIdx.x; i < E; i += blockDim.x) {
    double m = -INFINITY;
    for (int w = 0; w < warps; ++w) m = fmax(m, shared[w * (M + E) + M + i]);
    red.partial_extrema[static_cast<int64_t>(blockIdx.x) * E + i] = m;
  }
  __threadfence();
  // All of this block's partials written and fenced before thread 0 counts the block: otherwise the last
  // block can sum a partial that another warp of this one has not written yet.
  __syncthreads();
  DARA_BLOCK_SHARED(bool, last_block);
  if (threadIdx.x == 0) last_block = atomicAdd(red.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last_block) return;
  __threadfence();

  for (int i = threadIdx.x; i < M; i += blockDim.x) {
    double s = 0.0;
    for (unsigned b = 0; b < gridDim.x; ++b) s += __ldcg(red.partial + static_cast<int64_t>(b) * M + i);
    red.accumulators[i] = s;
  }
  for (int i = threadIdx.x; i < E; i += blockDim.x) {
    double m = -INFINITY;
    for (unsigned b = 0; b < gridDim.x; ++b) m = fmax(m, __ldcg(red.partial_extrema + static_cast<int64_t>(b) * E + i));
    red.extrema[i] = m;
  }
  __syncthreads();
  if (threadIdx.x != 0 || !red.finalize) return;
  double scratch[2 * kMaxCudaRewards];
  const FinalizeInputs in{red.given_accumulators ? red.given_accumulators : red.accumulators,
                          red.given_extrema ? red.given_extrema : red.extrema, p.base, p.bounds};
  finalize(p.options, L, in, out, scratch);
}

}  // namespace

cudaError_t launch_accumulate(const CudaProblem& p, const Table& t, const Reduction& r, const Results& out, int blocks,
                              cudaStream_t stream) {
  const size_t shared = accumulate_shared_bytes(p.K, p.C);
  cudaError_t status = cudaSuccess;
  dispatch_rows(p, [&](auto kt, auto real) {
    constexpr int KT = decltype(kt)::value;
    using Real = decltype(real);
    status = launch_kernel("accumulate_kernel", accumulate_kernel<KT, Real>, blocks, kWarpsPerBlock * 32, shared,
                           stream, p, t, r, out);
  });
  return status;
}

}  // namespace cuda
}  // namespace dara
