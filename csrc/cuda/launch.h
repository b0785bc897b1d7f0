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
// Resident blocks per SM the grid asks for: enough warps in flight to hide
// load latency, few enough that the last block's partial reduction stays short.
constexpr int kBlocksPerMultiprocessor = 4;

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

int grid_blocks(int64_t max_groups, int multiprocessors);
size_t accumulate_shared_bytes(int K, int C);

// Launch 1: accumulate; its last block reduces the partials (fixed order)
// and, when r.finalize, runs finalize. Launch 2: apply.
cudaError_t launch_accumulate(const CudaProblem& p, const Table& t, const Reduction& r, const Results& out, int blocks,
                              cudaStream_t stream);
cudaError_t launch_apply(const CudaProblem& p, const Table& t, const double* affine, const CudaApplyOutputs& out,
                         int blocks, cudaStream_t stream);

}  // namespace cuda
}  // namespace dara
