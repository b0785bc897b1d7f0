// The emulated device as the tests' binding sees it: its settings, the launches
// it ran, and the error a kernel that diverges raises.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dara_emulation {

struct Config {
  int multiprocessors;  // cudaDevAttrMultiProcessorCount
  uint64_t seed;        // the block, warp and lane orders
};

// An H100's 132 multiprocessors.
constexpr Config kDefaultConfig{132, 0};

struct LaunchRecord {
  std::string kernel;
  dim3 grid, block;
  size_t shared_bytes;
};

// Resets the launch record and the order's random state.
void configure(const Config& config);
const std::vector<LaunchRecord>& launches();

// A barrier or shuffle that cannot complete: the message names the kernel, the block and where each thread is.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace dara_emulation
