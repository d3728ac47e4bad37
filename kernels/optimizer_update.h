// The kernel front for the optimizers' fused element updates (train/optim): each function
// dispatches with a switch on the device type of its tensors (all must agree) to the CPU
// implementation (cpu/optimizer_update.cc) or the GPU one (the table of gpu/gpu_kernels.h;
// UnimplementedError "[Adam] has no GPU kernel in this build" without CUDA). Outputs are written in
// place into the given tensors, which must not alias the inputs. Stateless; thread-safe for
// distinct outputs.
#pragma once

#include "runtime/tensor.h"

namespace dtensor::kernels {

// Parameters of one Adam step (tf.keras semantics, see train/optim/optimizers.h): the moment
// decay rates, the bias-corrected learning rate, epsilon (added unscaled) and the decoupled
// weight decay factor applied to the variable (1 without decay). Cast to the variable's dtype.
struct AdamStepParams {
  double beta1, beta2, lr_t, epsilon, decay;
};

// sgd_update, sgd_momentum_update and adam_update: declared, with their contracts, by the kernel
// list (kernels/kernel_list.h, DTENSOR_OPTIMIZER_KERNEL).
#define DTENSOR_OPTIMIZER_KERNEL(ret, name, params, args, op, devices, check) ret name params;
#include "kernels/kernel_list.h"

}  // namespace dtensor::kernels
