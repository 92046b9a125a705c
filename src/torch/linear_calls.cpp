// flashnorm::linear_calls() -> int (linear_calls.h).
#include "linear_calls.h"

#include <torch/csrc/stable/library.h>

namespace flashnorm::torch_ops {
namespace {

int64_t linear_calls() { return linear_call_count().load(std::memory_order_relaxed); }

}  // namespace

// No tensor arguments: registered for every backend.
STABLE_TORCH_LIBRARY_IMPL(flashnorm, CompositeExplicitAutograd, m) {
  m.impl("linear_calls", TORCH_BOX(&linear_calls));
}

}  // namespace flashnorm::torch_ops
