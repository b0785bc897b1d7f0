// The op's fresh CPU tensors (outputs and accumulators). A small batch's
// call makes fourteen of them and is tens of microseconds in all: at::empty
// adds a trip through the dispatcher to each, and c10's CPU allocator a
// 64-byte-aligned posix_memalign, which costs glibc several times a plain
// malloc. Small tensors therefore come from malloc (16-byte aligned, which
// no kernel of ours or of torch's needs more than for a few hundred bytes);
// large ones from c10's allocator, whose alignment their SIMD stores use.
// Either way the tensor is filled as at::empty fills it under
// torch.utils.deterministic.fill_uninitialized_memory (the tests' NaN fill).
#pragma once
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <c10/core/Allocator.h>

#include <cstdlib>

namespace dara {

constexpr size_t kSmallTensorBytes = 64 << 10;

class MallocAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    void* data = bytes ? std::malloc(bytes) : nullptr;
    TORCH_CHECK(data || bytes == 0, "dara: could not allocate ", bytes, " bytes");
    return {data, data, &std::free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &std::free; }
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
};

inline at::Tensor new_tensor(at::IntArrayRef sizes, at::ScalarType dtype) {
  // Never destroyed: a storage may outlive the extension's static objects.
  static MallocAllocator* small = new MallocAllocator;
  const size_t bytes = c10::multiply_integers(sizes) * c10::elementSize(dtype);
  at::Tensor t =
      bytes <= kSmallTensorBytes
          ? at::detail::empty_generic(sizes, small, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, std::nullopt)
          : at::detail::empty_cpu(sizes, dtype);
  const auto& context = at::globalContext();
  if (context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory()) {
    at::native::fill_empty_deterministic_(t);
  }
  return t;
}

}  // namespace dara
