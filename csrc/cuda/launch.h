// The CUDA kernels' host interface: raw pointers, sizes and a stream, no
// torch headers, so the .cu files compile with plain nvcc anywhere.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "../core/finalize.h"
#include "../core/generated_tables.h"

namespace dara {
namespace cuda {

constexpr int kWarpsPerBlock = 8;
// Resident blocks per SM, one constant a kernel: its __launch_bounds__ hold
// nvcc's register allocation to it, and grid_blocks sizes its grid for it.
// scripts/cuda_resources.py, run by scripts/check_cuda_compiles.sh, fails on
// any spill or on fewer resident blocks than these.
// Accumulate: 1, as its K = 8 copy takes 195 registers a thread (nvcc 13.0,
// sm_90) and bounds of 2 blocks made it spill 448 bytes; raising it takes a
// redesign of its per-thread arrays (K rewards, C columns, C (C + 1) / 2 cross
// products).
constexpr int kAccumulateBlocksPerMultiprocessor = 1;
// Apply: 2, so this memory-bound kernel keeps 16 warps an SM in flight to hide
// load latency; every copy fits 128 registers a thread without spilling, while
// at 4 (64 registers) its K = 8 copy spilled 52 bytes.
constexpr int kApplyBlocksPerMultiprocessor = 2;

enum class DType : int { kFloat32, kFloat64, kFloat16, kBFloat16, kBool, kUInt8, kInt32, kInt64 };

struct CudaProblem {
  const void* rewards;
  DType rewards_dtype;
  int K;
  int C;                // combined columns: Options::combined_columns(K)
  int64_t group_size;   // > 0: contiguous groups of this size
  const int64_t* rows;  // CSR of group_index (nullptr when contiguous)
  const int64_t* offsets;
  const int64_t* num_groups;    // device scalar (group_index: no host synchronisation), or nullptr:
  int64_t contiguous_groups;    // N / group_size
  const double* base;           // b_k
  const double* token_weights;  // L_j, or nullptr
  const double* bounds;         // [K, 2], or nullptr
  Options options;
};

// The per-group table (GroupTable, core/generated_tables.h), written by accumulate and
// read by apply, in double: the mean stays double in the row formulas
// (row_signal.h); both kernels round the scales and weights to the row type
// in registers, so they see the same values.
using Table = GroupTable;

struct Reduction {
  double* partial;                   // [blocks, M]
  double* partial_extrema;           // [blocks, 2K]
  unsigned int* counter;             // a fresh one each call, zeroed before the launch
  double* accumulators;              // [M] out
  double* extrema;                   // [2K] out
  const double* given_accumulators;  // all-reduced ones to finalize with, or nullptr
  const double* given_extrema;
  bool finalize;
};

// Finalize's outputs; `combine` and `shift_scale` point into one device
// buffer of C + 2 doubles that apply reads.
using Results = FinalizeOutputs;

struct CudaApplyOutputs {
  float* advantages;
  bool* keep;
  float* query_scale;
  bool* informative;
  bool* sum_informative;
  float* token_advantages;  // [N, T] or nullptr
  const void* mask;
  DType mask_dtype;
  int64_t T;
};

// Enough blocks for one warp a group, at most those the multiprocessors hold at
// once: a grid-stride loop takes the rest, and accumulate's last block sums
// fewer partials.
constexpr int grid_blocks(int64_t max_groups, int multiprocessors, int blocks_per_multiprocessor) {
  const int64_t needed = (max_groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t cap = static_cast<int64_t>(multiprocessors) * blocks_per_multiprocessor;
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

// Each warp's accumulators and extrema, in doubles.
constexpr size_t accumulate_shared_bytes(int K, int C) {
  const AccumulatorLayout L{K, C};
  return sizeof(double) * kWarpsPerBlock * static_cast<size_t>(L.size() + L.extrema_size());
}

// No launch sets cudaFuncSetAttribute: within 48 KiB a kernel needs none, and
// the any-K kernel, which every K shares, would take one attribute from
// several host threads at once.
static_assert(accumulate_shared_bytes(kMaxCudaRewards, max_column_count(kMaxCudaRewards)) <= 48 * 1024,
              "accumulate's shared memory at kMaxCudaRewards outgrows the 48 KiB a launch may take without "
              "cudaFuncSetAttribute: shrink it, or set the attribute once per kernel, never per launch");

// Launch 1: accumulate; its last block reduces the partials (fixed order)
// and, when r.finalize, runs finalize. Launch 2: apply.
cudaError_t launch_accumulate(const CudaProblem& p, const Table& t, const Reduction& r, const Results& out, int blocks,
                              cudaStream_t stream);
cudaError_t launch_apply(const CudaProblem& p, const Table& t, const double* affine, const CudaApplyOutputs& out,
                         int blocks, cudaStream_t stream);

}  // namespace cuda
}  // namespace dara
