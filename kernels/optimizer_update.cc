// The device switch of kernels/optimizer_update.h: one definition per optimizer kernel of the
// kernel list (kernels/kernel_list.h).
#include "kernels/optimizer_update.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels {

#define DTENSOR_OPTIMIZER_KERNEL(ret, name, params, args, op, devices, check) \
  ret name params DTENSOR_KERNEL_FRONT(name, args, op, devices, check)
#include "kernels/kernel_list.h"

}  // namespace dtensor::kernels
