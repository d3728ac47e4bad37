// The fronts of runtime/element_loops.h: one definition per line of runtime/element_loop_list.h.
#include "runtime/element_loops.h"

#include "runtime/device_dispatch.h"

namespace dtensor::kernels {

#define DTENSOR_ELEMENT_LOOP(ret, name, params, args, op, devices, check)   \
  ret name params DTENSOR_DEVICE_FRONT(name, args, op, devices, check,     \
                                       gpu::ElementLoopTable, gpu::element_loop_table)
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP

}  // namespace dtensor::kernels
