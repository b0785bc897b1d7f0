// Apply (launch 2): one warp per group; each lane takes rows, writes the
// advantage, keep flag and query scale, then the warp writes the [N, T]
// token rows together so each row's stores are coalesced.
#include "../core/row_signal.h"
#include "device_common.cuh"
#include "launch.h"

namespace dara {
namespace cuda {
namespace {

// Every row is scored in the row type with the same row_signal as
// accumulate's row pass, from the same table rounded the same way, so both
// agree on keep and scorable. s_j and s_j - shift are taken in double, as
// finalize takes the batch mean: in a batch with no spread the factor is
// 1 / bn_eps, and a float s_j one ulp from the float mean came out 1e-2 off
// (gd2po_hard, two kept rows; measured on a host emulation of this kernel).
template <int KT, typename Real>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kApplyBlocksPerMultiprocessor)
    apply_kernel(CudaProblem p, Table t, const double* affine, CudaApplyOutputs out) {
  constexpr int N = cuda_rewards<KT>();
  const int K = KT > 0 ? KT : p.K;
  const int C = p.C;
  const Options& o = p.options;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double base[N];
  double combine[cuda_columns<KT>()];
  load_base<KT>(p, base);
  for (int c = 0; c < C; ++c) combine[c] = affine[c];
  const double shift = affine[C], scale = affine[C + 1];
  const int64_t groups = group_count(p);
  double mean[N];
  Real sc[N], weight[N], r[N], reward_a[N], column_a[cuda_columns<KT>()];
  double column_d[cuda_columns<KT>()];
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * warps + warp; g < groups;
       g += static_cast<int64_t>(gridDim.x) * warps) {
    int64_t begin, end;
    group_range(p, g, begin, end);
    for (int k = 0; k < K; ++k) {
      mean[k] = t.mean[g * K + k];
      sc[k] = static_cast<Real>(t.scale[g * K + k]);
      weight[k] = o.group_weighted() ? static_cast<Real>(t.weight[g * K + k]) : Real(0);
    }
    GroupRefOf<Real> group{mean, sc, o.group_weighted() ? weight : nullptr, 0.0, Real(0)};
    if (o.summed_reward()) {
      group.sum_mean = t.sum_mean[g];
      group.sum_scale = static_cast<Real>(t.sum_scale[g]);
    }
    const double kappa = t.kappa[g];
    const unsigned signal = t.signal[g];
    const bool any = signal & kAnyActive, sum = signal & kSumActive, zeroed = signal & kZeroed;
    const double factor = (o.apply_query_scale ? kappa : 1.0) * scale;
    for (int64_t chunk = begin; chunk < end; chunk += 32) {
      const int64_t i = chunk + lane;
      const bool here = i < end;
      const int64_t j = here ? row_at(p, i) : 0;
      float value = 0.0f;
      if (here) {
        load_row<KT>(p, j, K, r);
        const RowSignal rs = row_signal<KT>(r, K, o, base, group, reward_a, column_a);
        for (int c = 0; c < C; ++c) column_d[c] = column_a[c];
        value = zeroed ? 0.0f : static_cast<float>(row_advantage<0>(rs, column_d, C, combine, shift, factor));
        out.advantages[j] = value;
        out.keep[j] = rs.keep;
        out.query_scale[j] = static_cast<float>(kappa);
        out.informative[j] = any;
        out.sum_informative[j] = sum;
      }
      if (!out.token_advantages) continue;
      const int rows_here = static_cast<int>(end - chunk < 32 ? end - chunk : 32);
      for (int q = 0; q < rows_here; ++q) {
        const int64_t jq = __shfl_sync(0xffffffffu, j, q);
        const float vq = __shfl_sync(0xffffffffu, value, q);
        for (int64_t col = lane; col < out.T; col += 32) {
          const int64_t at = jq * out.T + col;
          out.token_advantages[at] = vq * load_as_float(out.mask, out.mask_dtype, at);
        }
      }
    }
  }
}

}  // namespace

cudaError_t launch_apply(const CudaProblem& p, const Table& t, const double* affine, const CudaApplyOutputs& out,
                         int blocks, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  dispatch_rows(p, [&](auto kt, auto real) {
    constexpr int KT = decltype(kt)::value;
    using Real = decltype(real);
    status = launch_kernel("apply_kernel", apply_kernel<KT, Real>, blocks, kWarpsPerBlock * 32, 0, stream, p, t, affine,
                           out);
  });
  return status;
}

}  // namespace cuda
}  // namespace dara
