// The CPU implementations behind kernels/optimizer_update.h, with its contract (host
// memory). Private to //kernels.
#pragma once

#include "kernels/optimizer_update.h"

namespace dtensor::kernels::cpu {

void sgd_update(const Tensor& var, const Tensor& grad, Tensor& var_out, double lr);
void sgd_momentum_update(const Tensor& var, const Tensor& grad, const Tensor& velocity,
                         Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                         bool nesterov);
void adam_update(const Tensor& var, const Tensor& grad, const Tensor& m, const Tensor& v,
                 Tensor& var_out, Tensor& m_out, Tensor& v_out, const AdamStepParams& params);

}  // namespace dtensor::kernels::cpu
