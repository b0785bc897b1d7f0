// Device helpers: the one kernel launch, typed loads, warp reductions with
// one fixed order (lane 0 holds the result, then broadcasts it), and the
// dispatch on K and on the row type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../core/group_math.h"
#include "../core/row_arrays.h"
#include "launch.h"

namespace dara {
namespace cuda {

// Kernel launches and block-shared declarations go through these so that the
// tests' CPU emulation (tests/cuda_emulation), which compiles these same files
// with g++, can run them; under nvcc they are the plain launch and declarations.
#if defined(__CUDACC__)
#define DARA_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#define DARA_BLOCK_SHARED(type, name) __shared__ type name
#elif !defined(DARA_CUDA_EMULATION)
#error "csrc/cuda's kernels compile with nvcc, or with g++ under the tests' emulation (tests/cuda_emulation)"
#endif

// `name` names the kernel in the emulation's errors.
template <typename... Params, typename... Args>
cudaError_t launch_kernel([[maybe_unused]] const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                          size_t shared_bytes, cudaStream_t stream, const Args&... args) {
#if defined(__CUDACC__)
  kernel<<<grid, block, shared_bytes, stream>>>(args...);
#else
  dara_emulation::launch(name, kernel, grid, block, shared_bytes, stream, args...);
#endif
  return cudaGetLastError();
}

template <int KT>
constexpr int cuda_rewards() {
  return max_rewards<KT, kMaxCudaRewards>();
}

// The combined columns of any mode for KT rewards (max_column_count, wire.COLUMN_MODES).
template <int KT>
constexpr int cuda_columns() {
  return max_column_count(cuda_rewards<KT>());
}

// A mask entry, or a reward of a type narrower than double, as a float.
__device__ __forceinline__ float load_as_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat64:
      return static_cast<float>(static_cast<const double*>(base)[i]);
    case DType::kFloat16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kBool:
    case DType::kUInt8:
      return static_cast<float>(static_cast<const uint8_t*>(base)[i]);
    case DType::kInt32:
      return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::kInt64:
      return static_cast<float>(static_cast<const int64_t*>(base)[i]);
  }
  return 0.0f;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return __shfl_sync(0xffffffffu, v, 0);
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
  return __shfl_sync(0xffffffffu, v, 0);
}

__device__ __forceinline__ void group_range(const CudaProblem& p, int64_t g, int64_t& begin, int64_t& end) {
  if (p.rows) {
    begin = p.offsets[g];
    end = p.offsets[g + 1];
  } else {
    begin = g * p.group_size;
    end = begin + p.group_size;
  }
}

__device__ __forceinline__ int64_t group_count(const CudaProblem& p) {
  return p.num_groups ? *p.num_groups : p.contiguous_groups;
}

__device__ __forceinline__ int64_t row_at(const CudaProblem& p, int64_t position) {
  return p.rows ? p.rows[position] : position;
}

// Row j's K rewards in the row type, with the options' reward gates
// applied: float64 rewards take the double kernels (dispatch_rows), every
// narrower type the float ones.
template <int KT, typename Real>
__device__ __forceinline__ void load_row(const CudaProblem& p, int64_t j, int K, Real* r) {
  for (int k = 0; k < (KT > 0 ? KT : K); ++k) {
    if constexpr (std::is_same_v<Real, double>) {
      r[k] = static_cast<const double*>(p.rewards)[j * K + k];
    } else {
      r[k] = load_as_float(p.rewards, p.rewards_dtype, j * K + k);
    }
  }
  gate_row<KT>(r, K, p.options);
}

// b_k: the row formulas take them in double (GRPO's summed reward is a double sum).
template <int KT>
__device__ __forceinline__ void load_base(const CudaProblem& p, double* base) {
  for (int k = 0; k < (KT > 0 ? KT : p.K); ++k) base[k] = p.base[k];
}

template <typename F>
void dispatch_k(int K, const F& f) {
  switch (K) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return;
    case 2:
      f(std::integral_constant<int, 2>{});
      return;
    case 3:
      f(std::integral_constant<int, 3>{});
      return;
    case 4:
      f(std::integral_constant<int, 4>{});
      return;
    case 8:
      f(std::integral_constant<int, 8>{});
      return;
    default:
      f(std::integral_constant<int, 0>{});
      return;
  }
}

// f(KT, Real{}): rows in float, or in double for float64 rewards. Rounding
// float64 rows to float would cost a reward far from zero its spread: on the
// offset sweep (100 + 0.01 x) up to 5e-4 of the advantage, 5x the tolerance,
// measured by rounding the rows before the reference. float64 rewards take
// the any-K kernels only: K-specialised double copies made the nvcc time for
// sm_80 and sm_90 41 s instead of 25 s, and would only speed up float64 input.
template <typename F>
void dispatch_rows(const CudaProblem& p, const F& f) {
  if (p.rewards_dtype == DType::kFloat64) {
    f(std::integral_constant<int, 0>{}, double{});
  } else {
    dispatch_k(p.K, [&](auto kt) { f(kt, float{}); });
  }
}

}  // namespace cuda
}  // namespace dara
