// Op schemas for the dara namespace. Implementations register per device in
// cpu/advantage_cpu.cpp and cuda/advantage_cuda_binding.cpp; the Python fake
// kernels live in dara_kernels/_ops.py.
#include <Python.h>
#include <torch/library.h>

extern "C" {
// An importable module so `import dara_kernels._C` loads the op registrations.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(dara, m) {
  m.def(
      "fused_advantage(Tensor rewards, Tensor? group_index, int group_size, Tensor reward_weights, "
      "Tensor? response_mask, Tensor? response_lengths, Tensor? reward_bounds, Tensor? accumulators, "
      "Tensor? extrema, float[] options) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
      "Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "accumulate(Tensor rewards, Tensor? group_index, int group_size, Tensor reward_weights, "
      "Tensor? response_mask, Tensor? response_lengths, float[] options) -> (Tensor, Tensor)");
}
