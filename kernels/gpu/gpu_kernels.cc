#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels::gpu {
namespace {

// The runtime's element-loop fronts read this table's element-loop part (runtime/element_loops.h).
[[maybe_unused]] const bool element_loops_linked = [] {
  element_loop_table = &registered_table;
  return true;
}();

}  // namespace
}  // namespace dtensor::kernels::gpu
