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

// var_out = var - lr * grad. f32 or f64, equal shapes (checked by the optimizer).
void sgd_update(const Tensor& var, const Tensor& grad, Tensor& var_out, double lr);
// Keras momentum: velocity_out = momentum * velocity - lr * grad; var_out = var + velocity_out
// (Nesterov: var + momentum * velocity_out - lr * grad).
void sgd_momentum_update(const Tensor& var, const Tensor& grad, const Tensor& velocity,
                         Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                         bool nesterov);
// m_out = b1 m + (1 - b1) g; v_out = b2 v + (1 - b2) g^2;
// var_out = var * decay - lr_t * m_out / (sqrt(v_out) + epsilon). Large tensors are split over
// the thread pool (not from inside a worker).
void adam_update(const Tensor& var, const Tensor& grad, const Tensor& m, const Tensor& v,
                 Tensor& var_out, Tensor& m_out, Tensor& v_out, const AdamStepParams& params);

}  // namespace dtensor::kernels
