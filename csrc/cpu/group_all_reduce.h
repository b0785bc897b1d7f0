// Distributed mode inside one call: the accumulators (and, for SAW and
// SA-MRPO without bounds, the extrema) are all-reduced between accumulate
// and finalize through torch's functional collectives, over the process
// group registered under `group_name`. Each rank then reads its rewards
// twice, as one process does, instead of running accumulate again in a
// second call (docs/architecture.md).
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>

namespace dara {

inline at::Tensor group_all_reduce(const at::Tensor& values, const char* reduce_op, const std::string& group_name) {
  static const auto reduce = c10::Dispatcher::singleton().findOp({"_c10d_functional::all_reduce", ""});
  static const auto wait = c10::Dispatcher::singleton().findOp({"_c10d_functional::wait_tensor", ""});
  TORCH_CHECK(reduce.has_value() && wait.has_value(),
              "dara: group_name needs torch.distributed (this torch build has no functional collectives)");
  torch::jit::Stack stack{values, std::string(reduce_op), group_name};
  reduce->callBoxed(&stack);
  stack = {stack[0]};
  wait->callBoxed(&stack);
  return stack[0].toTensor();
}

}  // namespace dara
