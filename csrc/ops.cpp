// Registers the dara op schemas (generated into core/generated_tables.h from
// dara_kernels/wire.py). Implementations register per device in
// cpu/binding.cpp and cuda/binding.cpp (device_layout, for every device, in
// device_layout.cpp); the fake kernels
// for torch.compile live in dara_kernels/_ops.py.
#include <Python.h>
#include <torch/library.h>

#include "core/generated_tables.h"

extern "C" {
// An importable module so `import dara_kernels._C` loads the op registrations. `built_with_cuda` tells Python
// whether the CUDA kernels registered, as a constant read once: torch.compile cannot trace a dispatcher query.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  PyObject* module = PyModule_Create(&module_def);
#ifdef DARA_WITH_CUDA
  const long built_with_cuda = 1;
#else
  const long built_with_cuda = 0;
#endif
  if (module != nullptr && PyModule_AddIntConstant(module, "built_with_cuda", built_with_cuda) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
}

TORCH_LIBRARY(dara, m) {
  m.def(dara::kFusedAdvantageSchema);
  m.def(dara::kAccumulateSchema);
  m.def("device_layout(Tensor group_index) -> (Tensor rows, Tensor offsets, Tensor num_groups)");
}
