// The device switch of kernels/optimizer_update.h.
#include "kernels/optimizer_update.h"

#include "kernels/cpu/cpu_optimizer_update.h"
#include "kernels/dispatch.h"
#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels {

void sgd_update(const Tensor& var, const Tensor& grad, Tensor& var_out, double lr) {
  return dispatch::on(
      dispatch::device_type_of("SGD", var, grad, var_out),
      [&] { return cpu::sgd_update(var, grad, var_out, lr); },
      [&] { return gpu::kernel(&gpu::Table::sgd_update, "SGD")(var, grad, var_out, lr); });
}

void sgd_momentum_update(const Tensor& var, const Tensor& grad, const Tensor& velocity,
                         Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                         bool nesterov) {
  return dispatch::on(
      dispatch::device_type_of("SGD", var, grad, velocity, var_out, velocity_out),
      [&] {
        return cpu::sgd_momentum_update(var, grad, velocity, var_out, velocity_out, lr, momentum,
                                        nesterov);
      },
      [&] {
        return gpu::kernel(&gpu::Table::sgd_momentum_update, "SGD")(
            var, grad, velocity, var_out, velocity_out, lr, momentum, nesterov);
      });
}

void adam_update(const Tensor& var, const Tensor& grad, const Tensor& m, const Tensor& v,
                 Tensor& var_out, Tensor& m_out, Tensor& v_out, const AdamStepParams& params) {
  return dispatch::on(
      dispatch::device_type_of("Adam", var, grad, m, v, var_out, m_out, v_out),
      [&] { return cpu::adam_update(var, grad, m, v, var_out, m_out, v_out, params); },
      [&] {
        return gpu::kernel(&gpu::Table::adam_update, "Adam")(var, grad, m, v, var_out, m_out, v_out,
                                                             params);
      });
}

}  // namespace dtensor::kernels
