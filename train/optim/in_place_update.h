// In-place optimizer updates: the element updates of kernels/optimizer_update.h written back
// into the buffers they read (the variable's and its slots'), for replays of captured steps
// where those buffers are held by no one else (Optimizer::apply checks). Each element is computed
// by the same expression, in the same type and order, as the kernel's, so results are bitwise
// the kernel's. Host (CPU) tensors of f32 or f64 only. Large tensors are split over the thread
// pool (not from inside a worker). Stateless; thread-safe for distinct buffers.
#pragma once

#include "kernels/optimizer_update.h"
#include "runtime/tensor.h"

namespace dtensor::optim_internal {

// Each function also writes the new values, rounded to bf16, into `bf16_copy` in the same pass
// when it is given (an f32 variable's bf16 copy, DVariable::update_in_place_with_copy).

// var -= lr * grad.
void sgd_in_place(Tensor& var, const Tensor& grad, double lr, Tensor* bf16_copy = nullptr);
// Keras momentum (see kernels::sgd_momentum_update) into var and velocity.
void sgd_momentum_in_place(Tensor& var, const Tensor& grad, Tensor& velocity, double lr,
                           double momentum, bool nesterov, Tensor* bf16_copy = nullptr);
// Adam (see kernels::adam_update) into var, m and v.
void adam_in_place(Tensor& var, const Tensor& grad, Tensor& m, Tensor& v,
                   const kernels::AdamStepParams& params, Tensor* bf16_copy = nullptr);

}  // namespace dtensor::optim_internal
