// Accumulate (launch 1): one warp per group, walking groups with a grid
// stride. Each warp adds its groups into its own shared-memory accumulators;
// blocks write partials; the last block to finish sums them in block order
// (deterministic) and runs finalize, so the op needs no host round trip.
#include <cmath>

#include "../core/finalize.h"
#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "../core/wire.h"
#include "device_common.cuh"
#include "launch.h"

namespace dara {
namespace cuda {
namespace {

// Per-row arithmetic runs in float. Double is kept where values are summed
// into group statistics (sums and squared deviations that give the mean and
// std) and into the batch accumulators. Each group's contribution to the
// batch accumulators is summed over its rows in float (as the Triton kernels
// sum a tile) and added to the double accumulators once per group.
template <int KT>
__device__ void accumulate_group(const Problem& p, const Table& t, const float* base, int64_t g, int lane, double* acc,
                                 double* extrema, const AccumulatorLayout& L) {
  constexpr int N = KT > 0 ? KT : kMaxCudaRewards;
  const int K = KT > 0 ? KT : p.K;
  const int C = L.C;
  const Options& o = p.options;
  const bool raw_stats = o.raw_extremes();
  int64_t begin, end;
  group_range(p, g, begin, end);

  int count[N];
  double sum[N], sum_sq[N];
  float r[N], hi[N], lo[N];
  for (int k = 0; k < K; ++k) {
    count[k] = 0;
    sum[k] = sum_sq[k] = 0.0;
    hi[k] = lo[k] = -INFINITY;
  }
  int sum_count = 0;
  double sum_total = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    float rsum = 0.0f;
    bool scorable = false;
    for (int k = 0; k < K; ++k) {
      const float x = clean_reward(r[k], o);
      const bool valid = x == x;
      count[k] += valid ? 1 : 0;
      sum[k] += valid ? static_cast<double>(x) : 0.0;
      rsum += valid ? base[k] * x : 0.0f;
      scorable |= valid;
      if (raw_stats && valid) {
        sum_sq[k] += static_cast<double>(x) * static_cast<double>(x);  // exact: a float square fits a double
        hi[k] = fmaxf(hi[k], x);
        lo[k] = fmaxf(lo[k], -x);
      }
    }
    sum_count += scorable ? 1 : 0;
    sum_total += scorable ? static_cast<double>(rsum) : 0.0;
  }
  double mean[N];
  float row_mean[N];
  for (int k = 0; k < K; ++k) {
    count[k] = warp_sum(count[k]);
    sum[k] = warp_sum(sum[k]);
    mean[k] = count[k] > 0 ? sum[k] / count[k] : 0.0;
    row_mean[k] = static_cast<float>(mean[k]);
    if (raw_stats) {
      sum_sq[k] = warp_sum(sum_sq[k]);
      hi[k] = warp_max(hi[k]);
      lo[k] = warp_max(lo[k]);
    }
  }
  sum_count = warp_sum(sum_count);
  sum_total = warp_sum(sum_total);
  const double sum_mean = sum_count > 0 ? sum_total / sum_count : 0.0;
  const float row_sum_mean = static_cast<float>(sum_mean);

  double dev[N];
  for (int k = 0; k < K; ++k) dev[k] = 0.0;
  double sum_dev = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    float rsum = 0.0f;
    bool scorable = false;
    for (int k = 0; k < K; ++k) {
      const float x = clean_reward(r[k], o);
      const bool valid = x == x;
      const float d = valid ? x - row_mean[k] : 0.0f;
      dev[k] += static_cast<double>(d * d);
      rsum += valid ? base[k] * x : 0.0f;
      scorable |= valid;
    }
    if (o.combined_column() && scorable) {
      const float d = rsum - row_sum_mean;
      sum_dev += static_cast<double>(d * d);
    }
  }
  sum_dev = warp_sum(sum_dev);

  // Apply reads the float table: the row pass uses the same rounded values.
  float scale[N], weight[N];
  double spread[N];
  double spread_total = 0.0;
  for (int k = 0; k < K; ++k) {
    const ColumnStats s = finish_column(count[k], mean[k], warp_sum(dev[k]), o);
    row_mean[k] = static_cast<float>(s.mean);
    scale[k] = static_cast<float>(s.scale);
    spread[k] = p.base[k] * s.std;
    spread_total += spread[k];
    if (lane == 0) {
      acc[L.active(k)] += s.active;
      acc[L.raw_count(k)] += count[k];
      acc[L.raw_sum(k)] += sum[k];
      acc[L.raw_sum_sq(k)] += sum_sq[k];
      extrema[L.max_reward(k)] = fmax(extrema[L.max_reward(k)], static_cast<double>(hi[k]));
      extrema[L.max_negated_reward(k)] = fmax(extrema[L.max_negated_reward(k)], static_cast<double>(lo[k]));
      t.mean[g * K + k] = row_mean[k];
      t.scale[g * K + k] = scale[k];
    }
  }
  for (int k = 0; k < K; ++k) {
    const double w = spread_total != 0.0 ? spread[k] / spread_total : 0.0;
    weight[k] = static_cast<float>(w);
    if (o.group_weighted() && lane == 0) {
      acc[L.group_weight(k)] += w;
      t.weight[g * K + k] = weight[k];
    }
  }
  GroupRefOf<float> group{row_mean, scale, o.group_weighted() ? weight : nullptr, 0.0f, 0.0f};
  if (o.combined_column()) {
    const ColumnStats s = finish_column(sum_count, sum_mean, sum_dev, o);
    group.sum_mean = static_cast<float>(s.mean);
    group.sum_scale = static_cast<float>(s.scale);
    if (lane == 0) {
      t.sum_stats[2 * g] = group.sum_mean;
      t.sum_stats[2 * g + 1] = group.sum_scale;
    }
  }

  float energy[N], signal[N], token_signal[N], reward_a[N], column_a[N];
  float cross[N * N], token_cross[N * N];
  for (int k = 0; k < K; ++k) energy[k] = signal[k] = token_signal[k] = 0.0f;
  for (int c = 0; c < C * C; ++c) cross[c] = token_cross[c] = 0.0f;
  int kept = 0, rows = 0;
  float token_total = 0.0f;
  const bool token = p.token_weights != nullptr;
  for (int64_t i = begin + lane; i < end; i += 32) {
    const int64_t j = row_at(p, i);
    load_row<KT>(p, j, K, r);
    const RowSignal rs = row_signal<KT>(r, K, o, base, group, reward_a, column_a);
    for (int k = 0; k < K; ++k) energy[k] += reward_a[k] * reward_a[k];
    kept += rs.keep ? 1 : 0;
    if (!(rs.keep && rs.scorable)) continue;
    rows += 1;
    for (int c = 0; c < C; ++c) {
      signal[c] += column_a[c];
      for (int d = c; d < C; ++d) cross[c * C + d] += column_a[c] * column_a[d];
    }
    if (!token) continue;
    const float w = static_cast<float>(p.token_weights[j]);
    token_total += w;
    for (int c = 0; c < C; ++c) {
      token_signal[c] += w * column_a[c];
      for (int d = c; d < C; ++d) token_cross[c * C + d] += w * column_a[c] * column_a[d];
    }
  }
  for (int k = 0; k < K; ++k) {
    const float e = warp_sum(energy[k]);
    if (lane == 0) acc[L.energy(k)] += e;
  }
  for (int c = 0; c < C; ++c) {
    const float s = warp_sum(signal[c]);
    if (lane == 0) acc[L.signal(c)] += s;
    for (int d = c; d < C; ++d) {
      const float x = warp_sum(cross[c * C + d]);
      if (lane == 0) {
        acc[L.cross(c, d)] += x;
        if (d != c) acc[L.cross(d, c)] += x;
      }
    }
  }
  if (token) {
    for (int c = 0; c < C; ++c) {
      const float ts = warp_sum(token_signal[c]);
      if (lane == 0) acc[L.token_signal(c)] += ts;
      for (int d = c; d < C; ++d) {
        const float tx = warp_sum(token_cross[c * C + d]);
        if (lane == 0) {
          acc[L.token_cross(c, d)] += tx;
          if (d != c) acc[L.token_cross(d, c)] += tx;
        }
      }
    }
  }
  kept = warp_sum(kept);
  rows = warp_sum(rows);
  token_total = warp_sum(token_total);
  if (lane == 0) {
    acc[L.groups()] += 1.0;
    acc[L.rows()] += rows;
    acc[L.token_total()] += token_total;
    t.kappa[g] = static_cast<float>(kept) / static_cast<float>(end - begin);
  }
}

template <int KT>
__global__ void accumulate_kernel(Problem p, Table t, Reduction red, Results out) {
  extern __shared__ double shared[];
  const AccumulatorLayout L{p.K, p.C};
  const int M = L.size(), E = L.extrema_size();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double* acc = shared + warp * (M + E);
  double* extrema = acc + M;
  for (int i = lane; i < M; i += 32) acc[i] = 0.0;
  for (int i = lane; i < E; i += 32) extrema[i] = -INFINITY;
  __syncwarp();

  float base[KT > 0 ? KT : kMaxCudaRewards];
  load_base<KT>(p, base);
  const int64_t groups = group_count(p);
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * warps + warp; g < groups;
       g += static_cast<int64_t>(gridDim.x) * warps) {
    accumulate_group<KT>(p, t, base, g, lane, acc, extrema, L);
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
  __shared__ bool last_block;
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
  if (threadIdx.x != 0) return;
  *red.counter = 0u;
  if (!red.finalize) return;
  double scratch[2 * kMaxCudaRewards];
  const FinalizeInputs in{red.given_accumulators ? red.given_accumulators : red.accumulators,
                          red.given_extrema ? red.given_extrema : red.extrema, p.base, p.bounds};
  finalize(p.options, L, in, out, scratch);
}

}  // namespace

int grid_blocks(int64_t max_groups, int multiprocessors) {
  const int64_t needed = (max_groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t cap = static_cast<int64_t>(multiprocessors) * kBlocksPerMultiprocessor;
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

size_t accumulate_shared_bytes(int K, int C) {
  const AccumulatorLayout L{K, C};
  return sizeof(double) * kWarpsPerBlock * static_cast<size_t>(L.size() + L.extrema_size());
}

cudaError_t launch_accumulate(const Problem& p, const Table& t, const Reduction& r, const Results& out, int blocks,
                              cudaStream_t stream) {
  const size_t shared = accumulate_shared_bytes(p.K, p.C);
  cudaError_t status = cudaSuccess;
  dispatch_k(p.K, [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    status = cudaFuncSetAttribute(accumulate_kernel<KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared));
    if (status != cudaSuccess) return;
    accumulate_kernel<KT><<<blocks, kWarpsPerBlock * 32, shared, stream>>>(p, t, r, out);
    status = cudaGetLastError();
  });
  return status;
}

}  // namespace cuda
}  // namespace dara
