// Accumulate (launch 1): one warp per group, walking groups with a grid
// stride. Each warp adds its groups into its own shared-memory accumulators;
// blocks write partials; the last block to finish sums them in block order
// (deterministic) and runs finalize, so the op needs no host round trip.
#include <cmath>

#include "../core/wire.h"
#include "../core/finalize.h"
#include "../core/group_math.h"
#include "../core/row_signal.h"
#include "device_common.cuh"
#include "launch.h"

namespace dara {
namespace cuda {
namespace {

template <int KT>
__device__ void accumulate_group(const Problem& p, const Table& t, int64_t g, int lane, double* acc,
                                 double* extrema, const AccumulatorLayout& L) {
  constexpr int N = KT > 0 ? KT : kMaxCudaRewards;
  const int K = KT > 0 ? KT : p.K;
  const int C = L.C;
  const Options& o = p.options;
  const bool raw_stats = o.method == kSaw || o.method == kSaMrpo;
  int64_t begin, end;
  group_range(p, g, begin, end);

  double count[N], sum[N], r[N];
  double sum_sq[N], hi[N], lo[N];
  for (int k = 0; k < K; ++k) {
    count[k] = sum[k] = sum_sq[k] = 0.0;
    hi[k] = lo[k] = -INFINITY;
  }
  double sum_count = 0.0, sum_total = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    double rsum = 0.0;
    bool scorable = false;
    for (int k = 0; k < K; ++k) {
      const double x = clean_reward(r[k], o);
      const bool valid = x == x;
      count[k] += valid ? 1.0 : 0.0;
      sum[k] += valid ? x : 0.0;
      rsum += valid ? p.base[k] * x : 0.0;
      scorable |= valid;
      if (raw_stats && valid) {
        sum_sq[k] += x * x;
        hi[k] = fmax(hi[k], x);
        lo[k] = fmax(lo[k], -x);
      }
    }
    sum_count += scorable ? 1.0 : 0.0;
    sum_total += scorable ? rsum : 0.0;
  }
  double mean[N];
  for (int k = 0; k < K; ++k) {
    count[k] = warp_sum(count[k]);
    sum[k] = warp_sum(sum[k]);
    mean[k] = count[k] > 0.0 ? sum[k] / count[k] : 0.0;
    if (raw_stats) {
      sum_sq[k] = warp_sum(sum_sq[k]);
      hi[k] = warp_max(hi[k]);
      lo[k] = warp_max(lo[k]);
    }
  }
  sum_count = warp_sum(sum_count);
  sum_total = warp_sum(sum_total);
  const double sum_mean = sum_count > 0.0 ? sum_total / sum_count : 0.0;

  double dev[N];
  for (int k = 0; k < K; ++k) dev[k] = 0.0;
  double sum_dev = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    load_row<KT>(p, row_at(p, i), K, r);
    double rsum = 0.0;
    bool scorable = false;
    for (int k = 0; k < K; ++k) {
      const double x = clean_reward(r[k], o);
      const bool valid = x == x;
      const double d = valid ? x - mean[k] : 0.0;
      dev[k] += d * d;
      rsum += valid ? p.base[k] * x : 0.0;
      scorable |= valid;
    }
    if (o.combined_column() && scorable) sum_dev += (rsum - sum_mean) * (rsum - sum_mean);
  }
  sum_dev = warp_sum(sum_dev);

  double scale[N], weight[N];
  double weight_total = 0.0;
  for (int k = 0; k < K; ++k) {
    const ColumnStats s = finish_column(count[k], mean[k], warp_sum(dev[k]), o);
    mean[k] = s.mean;
    scale[k] = s.scale;
    weight[k] = p.base[k] * s.std;
    weight_total += weight[k];
    if (lane == 0) {
      acc[L.active(k)] += s.active ? 1.0 : 0.0;
      acc[L.raw_count(k)] += count[k];
      acc[L.raw_sum(k)] += sum[k];
      acc[L.raw_sum_sq(k)] += sum_sq[k];
      extrema[L.max_reward(k)] = fmax(extrema[L.max_reward(k)], hi[k]);
      extrema[L.max_negated_reward(k)] = fmax(extrema[L.max_negated_reward(k)], lo[k]);
      t.mean[g * K + k] = static_cast<float>(s.mean);
      t.scale[g * K + k] = static_cast<float>(s.scale);
    }
  }
  for (int k = 0; k < K; ++k) {
    weight[k] = weight_total != 0.0 ? weight[k] / weight_total : 0.0;
    if (o.group_weighted() && lane == 0) {
      acc[L.group_weight(k)] += weight[k];
      t.weight[g * K + k] = static_cast<float>(weight[k]);
    }
  }
  // Apply reads the float table: the row pass must use the same rounded values.
  for (int k = 0; k < K; ++k) {
    mean[k] = static_cast<double>(static_cast<float>(mean[k]));
    scale[k] = static_cast<double>(static_cast<float>(scale[k]));
    weight[k] = static_cast<double>(static_cast<float>(weight[k]));
  }
  GroupRef group{mean, scale, o.group_weighted() ? weight : nullptr, 0.0, 0.0};
  if (o.combined_column()) {
    const ColumnStats s = finish_column(sum_count, sum_mean, sum_dev, o);
    group.sum_mean = static_cast<double>(static_cast<float>(s.mean));
    group.sum_scale = static_cast<double>(static_cast<float>(s.scale));
    if (lane == 0) {
      t.sum_stats[2 * g] = static_cast<float>(s.mean);
      t.sum_stats[2 * g + 1] = static_cast<float>(s.scale);
    }
  }

  double energy[N], signal[N], token_signal[N], reward_a[N], column_a[N];
  double cross[N * N], token_cross[N * N];
  for (int k = 0; k < K; ++k) energy[k] = signal[k] = token_signal[k] = 0.0;
  for (int c = 0; c < C * C; ++c) cross[c] = token_cross[c] = 0.0;
  double kept = 0.0, rows = 0.0, token_total = 0.0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    const int64_t j = row_at(p, i);
    load_row<KT>(p, j, K, r);
    const RowSignal rs = row_signal<KT>(r, K, o, p.base, group, reward_a, column_a);
    for (int k = 0; k < K; ++k) energy[k] += reward_a[k] * reward_a[k];
    kept += rs.keep ? 1.0 : 0.0;
    if (!(rs.keep && rs.scorable)) continue;
    const double w = p.token_weights ? p.token_weights[j] : 0.0;
    rows += 1.0;
    token_total += w;
    for (int c = 0; c < C; ++c) {
      signal[c] += column_a[c];
      token_signal[c] += w * column_a[c];
      for (int d = c; d < C; ++d) {
        cross[c * C + d] += column_a[c] * column_a[d];
        token_cross[c * C + d] += w * column_a[c] * column_a[d];
      }
    }
  }
  for (int k = 0; k < K; ++k) {
    const double e = warp_sum(energy[k]);
    if (lane == 0) acc[L.energy(k)] += e;
  }
  for (int c = 0; c < C; ++c) {
    const double s = warp_sum(signal[c]), ts = warp_sum(token_signal[c]);
    if (lane == 0) {
      acc[L.signal(c)] += s;
      acc[L.token_signal(c)] += ts;
    }
    for (int d = c; d < C; ++d) {
      const double x = warp_sum(cross[c * C + d]), tx = warp_sum(token_cross[c * C + d]);
      if (lane == 0) {
        acc[L.cross(c, d)] += x;
        acc[L.token_cross(c, d)] += tx;
        if (d != c) {
          acc[L.cross(d, c)] += x;
          acc[L.token_cross(d, c)] += tx;
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
    t.kappa[g] = static_cast<float>(kept / static_cast<double>(end - begin));
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

  const int64_t groups = *p.num_groups;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * warps + warp; g < groups;
       g += static_cast<int64_t>(gridDim.x) * warps) {
    accumulate_group<KT>(p, t, g, lane, acc, extrema, L);
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
  const int64_t cap = static_cast<int64_t>(multiprocessors) * 4;
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

size_t accumulate_shared_bytes(int K, int C) {
  const AccumulatorLayout L{K, C};
  return sizeof(double) * kWarpsPerBlock * static_cast<size_t>(L.size() + L.extrema_size());
}

cudaError_t launch_accumulate(const Problem& p, const Table& t, const Reduction& r, const Results& out,
                              int blocks, cudaStream_t stream) {
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
