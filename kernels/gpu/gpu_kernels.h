// The GPU half of the kernel front (kernels/kernels.h): a table of function pointers that a GPU
// backend fills in when its library is linked (the CUDA kernels, kernels/cuda/, in a
// --config=cuda build or in a GPU test that links //kernels/cuda). The front looks an entry up
// when a kernel's inputs are on GPU devices; an empty entry (no backend linked, or a backend
// without that kernel) throws the front's one error, UnimplementedError
// "[conv2d] has no GPU kernel in this build". The entries are the kernel list's, with its
// contracts; each implementation may assume the front's checks (device types, shapes, dtypes,
// arguments) passed. Shape arithmetic (broadcast_shapes), set_blas_threads and philox4x32_10 are
// host-only and have no GPU half.
//
// Thread-safety: a backend registers its entries from static initializers (before main); after
// that the table is only read.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "kernels/optimizer_update.h"
#include "runtime/device_dispatch.h"
#include "runtime/element_loops.h"
#include "runtime/random_spec.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::gpu {

// One entry per kernel of the kernel list (kernels/kernel_list.h), named as the kernel and of
// its signature, e.g. `Tensor (*unary)(UnaryOp op, const Tensor& x) = nullptr;`; null where no
// linked backend implements it.
// The element loops' entries (copy_box_elements, fill_value, ...) come from the runtime floor's
// part of the table (runtime/element_loops.h), which the runtime's fronts read through
// gpu::element_loop_table; gpu_kernels.cc points that at this table.
struct Table : ElementLoopTable {
#define DTENSOR_GPU_TABLE_FIELD(ret, name, params, args, op, devices, check) \
  ret(*name) params = nullptr;
#define DTENSOR_KERNEL DTENSOR_GPU_TABLE_FIELD
#define DTENSOR_OPTIMIZER_KERNEL DTENSOR_GPU_TABLE_FIELD
#include "kernels/kernel_list.h"
#undef DTENSOR_GPU_TABLE_FIELD
};

// The registered entries: every entry null until a backend's static initializer fills its own.
// Constant-initialized, so a registration from any translation unit's initializer finds it.
inline Table registered_table{};

// The registered entry `member`, or the error naming `op` (a name or an op enum; see
// kernels/dispatch.h) if there is none.
template <typename F>
inline F* kernel(F* Table::*member, std::string_view op) {
  return dispatch::gpu_entry(&registered_table, member, op);
}

// Host <-> GPU copies for device-neutral callers (examples) that move host batches onto a GPU
// mesh and read results back.
// The entries live in the table's element-loop part (runtime/element_loops.h).
inline Tensor copy_to_gpu(const Tensor& host, const Device& device) {
  const ElementLoopTable* table = &registered_table;
  return dispatch::gpu_entry(table, &ElementLoopTable::copy_to_gpu, "copy_to_gpu")(host, device);
}
inline Tensor copy_to_host(const Tensor& tensor) {
  const ElementLoopTable* table = &registered_table;
  return dispatch::gpu_entry(table, &ElementLoopTable::copy_to_host, "copy_to_host")(tensor);
}

}  // namespace dtensor::kernels::gpu
