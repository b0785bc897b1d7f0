// The rules faulty_kernel breaks, one a kernel. Compiled like csrc/cuda's
// kernels (g++ -x c++ under emulated_cuda.h) and launched with the same helper.
#include <stdexcept>

#include "../../csrc/cuda/device_common.cuh"
#include "faulty_kernels.h"

namespace dara_emulation {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Threads past the first warp exit before the barrier the first warp waits at.
__global__ void exit_before_barrier(double* out) {
  if (threadIdx.x >= 32) return;
  __syncthreads();
  out[threadIdx.x] = 1.0;
}

// The two halves of the block wait at two different barriers.
__global__ void two_barriers(double* out) {
  if (threadIdx.x < kThreads / 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0;
}

// The two halves of each warp shuffle at two different places.
__global__ void split_shuffle(double* out) {
  const double v = threadIdx.x;
  if (threadIdx.x % 32 < 16) {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, v, 0);
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, v, 1);
  }
}

// The upper half of each warp exits before the shuffle its lower half waits at.
__global__ void exit_before_shuffle(double* out) {
  if (threadIdx.x % 32 >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0, 1);
}

// Each warp's first lane writes its slot and every thread reads the next warp's slot; `barrier` says whether a
// __syncthreads() separates the two.
__global__ void neighbour_read(double* out, bool barrier) {
  DARA_DYNAMIC_SHARED(double, slots);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) slots[warp] = warp;
  if (barrier) __syncthreads();
  out[threadIdx.x] = slots[(warp + 1) % kWarps];
}

// Reads one double past the launch's dynamic shared memory: ASan stops the process there.
__global__ void shared_overflow(double* out) {
  DARA_DYNAMIC_SHARED(double, slots);
  slots[threadIdx.x % kWarps] = 1.0;
  __syncthreads();
  out[threadIdx.x] = slots[kWarps];
}

void check(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(cudaGetErrorString(status));
}

}  // namespace

void faulty_kernel(const std::string& name, double* out) {
  using dara::cuda::launch_kernel;
  const size_t slots = sizeof(double) * kWarps;
  if (name == "exit_before_barrier") {
    check(launch_kernel("exit_before_barrier", exit_before_barrier, 1, kThreads, 0, nullptr, out));
  } else if (name == "two_barriers") {
    check(launch_kernel("two_barriers", two_barriers, 1, kThreads, 0, nullptr, out));
  } else if (name == "exit_before_shuffle") {
    check(launch_kernel("exit_before_shuffle", exit_before_shuffle, 1, kThreads, 0, nullptr, out));
  } else if (name == "split_shuffle") {
    check(launch_kernel("split_shuffle", split_shuffle, 1, kThreads, 0, nullptr, out));
  } else if (name == "neighbour_read_synced" || name == "neighbour_read_unsynced") {
    check(launch_kernel("neighbour_read", neighbour_read, 1, kThreads, slots, nullptr, out,
                        name == "neighbour_read_synced"));
  } else if (name == "unset_shared_limit") {
    // More than the default 48 KiB of dynamic shared memory, without cudaFuncSetAttribute: the launch fails.
    check(
        launch_kernel("neighbour_read", neighbour_read, 1, kThreads, (48 << 10) + sizeof(double), nullptr, out, true));
  } else if (name == "shared_overflow") {
    check(launch_kernel("shared_overflow", shared_overflow, 1, kThreads, slots, nullptr, out));
  } else {
    throw std::invalid_argument("no faulty kernel named " + name);
  }
}

}  // namespace dara_emulation
