// Force-included (g++ -include) ahead of every csrc/cuda file the tests'
// CPU emulation compiles: what nvcc gives device code beyond the real CUDA
// headers (the built-in indices, barriers, warp shuffles, atomics, shared
// memory, the kernel launch). The runtime behind it is emulated_runtime.cpp.
// Test-only: nothing here ships.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <tuple>
#include <type_traits>

#define DARA_CUDA_EMULATION 1
// nvcc's register bound: the emulated threads have no registers to bound.
#define __launch_bounds__(...)
#define DARA_DYNAMIC_SHARED(type, name) type* const name = ::dara_emulation::dynamic_shared<type>()
// The static tag is the declaration's identity: one allocation per block and declaration.
#define DARA_BLOCK_SHARED(type, name)     \
  static const char name##_declaration{}; \
  type& name = ::dara_emulation::block_shared<type>(&name##_declaration)

namespace dara_emulation {

using Site = std::source_location;

// The running thread's indices: the scheduler sets them before it resumes a thread.
struct Indices {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
};
extern Indices indices;

void sync_threads(const Site& where);
void sync_warp(unsigned mask, const Site& where);
enum class Shuffle { kIndex, kDown };
// Every lane of `mask` deposits `value`; returns the source lane's (kIndex: lane `lane_or_delta`; kDown: this
// lane + delta, or its own value past lane 31).
uint64_t shuffle(Shuffle kind, unsigned mask, uint64_t value, int lane_or_delta, const Site& where);
void* dynamic_shared_memory();
void* block_shared_memory(const void* declaration, size_t bytes);

template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_memory());
}

template <typename T>
T& block_shared(const void* declaration) {
  static_assert(std::is_trivial_v<T>, "__shared__ variables are not constructed");
  return *static_cast<T*>(block_shared_memory(declaration, sizeof(T)));
}

template <typename T>
T shuffled(Shuffle kind, unsigned mask, T value, int lane_or_delta, const Site& where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t), "a shuffle moves 8 bytes at most");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = shuffle(kind, mask, bits, lane_or_delta, where);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

using ThreadBody = void (*)(const void* closure);
// Runs every block of the grid (errors as the CUDA runtime reports a launch's, through cudaGetLastError;
// a kernel that diverges or deadlocks throws KernelError).
void run_grid(const char* kernel_name, dim3 grid, dim3 block, size_t shared_bytes, ThreadBody body,
              const void* closure);

template <typename... Params, typename... Args>
void launch(const char* kernel_name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t, const Args&... args) {
  static_assert((std::is_trivially_copyable_v<Params> && ...), "kernel parameters are copied to the device bytewise");
  struct Closure {
    void (*kernel)(Params...);
    std::tuple<Params...> params;
  };
  const Closure closure{kernel, std::tuple<Params...>(args...)};
  run_grid(
      kernel_name, grid, block, shared_bytes,
      [](const void* c) {
        const Closure& k = *static_cast<const Closure*>(c);
        std::apply(k.kernel, k.params);
      },
      &closure);
}

}  // namespace dara_emulation

inline const uint3& threadIdx = dara_emulation::indices.thread;
inline const uint3& blockIdx = dara_emulation::indices.block;
inline const dim3& blockDim = dara_emulation::indices.block_dim;
inline const dim3& gridDim = dara_emulation::indices.grid_dim;

inline void __syncthreads(const dara_emulation::Site& where = dara_emulation::Site::current()) {
  dara_emulation::sync_threads(where);
}

inline void __syncwarp(unsigned mask = 0xffffffffu,
                       const dara_emulation::Site& where = dara_emulation::Site::current()) {
  dara_emulation::sync_warp(mask, where);
}

template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane,
              const dara_emulation::Site& where = dara_emulation::Site::current()) {
  return dara_emulation::shuffled(dara_emulation::Shuffle::kIndex, mask, value, src_lane, where);
}

template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta,
                   const dara_emulation::Site& where = dara_emulation::Site::current()) {
  return dara_emulation::shuffled(dara_emulation::Shuffle::kDown, mask, value, static_cast<int>(delta), where);
}

// Every thread of every resident block is a fiber on one OS thread, switched only at barriers and warp
// operations, so an add is atomic as it stands and a fence orders nothing that is not already ordered.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

inline void __threadfence() {}

template <typename T>
T __ldcg(const T* address) {
  return *address;
}
