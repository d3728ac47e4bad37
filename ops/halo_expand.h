// The expansion of a window op (conv2d, pooling, their gradients) whose H or W is sharded: the
// steps every such op shares around its halo exchanges (ops/halo_window.h).
//
//   1. decide_window_inputs: the sharding solver (ops/sharding.h) decides the layouts with the
//      spatial dims as letters of their own, so a sharded H or W stays sharded (the solver only
//      considers mesh dims some input already uses: an unsharded H is never split here), and the
//      inputs are relayouted to them;
//   2. the op extends its windows (HaloWindow2d::extend) or not, and runs its local kernel per
//      local device with run_per_device, giving an empty or zero result where a device's output
//      is empty (uneven and empty shards) so that kernels never see empty operands;
//   3. for input gradients, HaloWindow2d::extend_adjoint sums the halos back.
//
// Called from inside an op's forward, where recording is paused (ops/op_internal.h). Stateless,
// thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "dtensor/dtensor.h"
#include "ops/sharding.h"

namespace dtensor {

struct WindowInputs {
  std::shared_ptr<const ShardingDecision> decision;
  std::vector<DTensor> inputs;  // in the decided layouts
};

WindowInputs decide_window_inputs(const OpSignature& sig,
                                  const std::vector<const DTensor*>& inputs);

// An input's extended windows kept from a forward pass for a gradient that reads them again
// (conv2d's filter gradient, max_pool2d's gradient), so that the backward pass exchanges only
// the adjoint: `windows` were extended from the input in `layout`. Immutable once built.
struct SavedWindows {
  Layout layout;
  std::vector<Tensor> windows;
};

// `kernel(i)` for every local device i of `mesh`, in local order, re-tagged with device i. A
// device whose result box `result_shape(i)` or one of whose operands has no elements gets
// zeros of that shape instead (an empty box, or the zero term of a window that reads nothing).
std::vector<Tensor> run_per_device(const Mesh& mesh, DType dtype,
                                   const std::function<Shape(size_t)>& result_shape,
                                   const std::function<bool(size_t)>& has_work,
                                   const std::function<Tensor(size_t)>& kernel);

}  // namespace dtensor
