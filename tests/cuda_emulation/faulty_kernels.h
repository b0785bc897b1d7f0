// Tiny kernels that break one rule each, to show that the emulation reports
// the break (the barrier, the kernel, the line) rather than hanging or passing.
#pragma once
#include <string>

namespace dara_emulation {

// Launches the named kernel with one block of 256 threads (out: 256 doubles, one a thread).
void faulty_kernel(const std::string& name, double* out);

}  // namespace dara_emulation
