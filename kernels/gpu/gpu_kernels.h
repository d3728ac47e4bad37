// The GPU half of the kernel front (kernels/kernels.h): a table of function pointers that a GPU
// backend fills in when its library is linked (the CUDA kernels, kernels/cuda/, in a
// --config=cuda build or in a GPU test that links //kernels/cuda). The front looks an entry up
// when a kernel's inputs are on GPU devices; an empty entry (no backend linked, or a backend
// without that kernel) throws the front's one error, UnimplementedError
// "[conv2d] has no GPU kernel in this build". The entries mirror kernels.h, then
// runtime/element_loops.h and kernels/optimizer_update.h, with those contracts; each
// implementation may assume the front's checks (device types, shapes, dtypes, arguments) passed.
// Shape arithmetic (broadcast_shapes), set_blas_threads and philox4x32_10 are host-only and have
// no GPU half.
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
#include "runtime/random_spec.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::gpu {

// One entry per kernel; null where no linked backend implements it.
struct Table {
  Tensor (*unary)(UnaryOp, const Tensor&) = nullptr;
  Tensor (*binary)(BinaryOp, const Tensor&, const Tensor&) = nullptr;
  Tensor (*scale)(const Tensor&, double) = nullptr;
  Tensor (*where)(const Tensor&, const Tensor&, const Tensor&) = nullptr;
  Tensor (*cast)(const Tensor&, DType) = nullptr;
  Tensor (*broadcast_to)(const Tensor&, const Shape&) = nullptr;
  Tensor (*sum_to)(const Tensor&, const Shape&) = nullptr;
  Tensor (*matmul)(const Tensor&, const Tensor&, const MatmulOptions&) = nullptr;
  void (*matmul_accumulate)(const Tensor&, const Tensor&, Tensor&, const MatmulOptions&) = nullptr;
  Tensor (*dense)(const Tensor&, const Tensor&, const Tensor*, std::optional<UnaryOp>,
                  const MatmulOptions&) = nullptr;
  Tensor (*reduce)(ReduceKind, const Tensor&, const std::vector<int64_t>&, bool) = nullptr;
  Tensor (*argmax)(const Tensor&, int64_t, bool) = nullptr;
  Tensor (*argmin)(const Tensor&, int64_t, bool) = nullptr;
  Tensor (*softmax)(const Tensor&, int64_t) = nullptr;
  Tensor (*log_softmax)(const Tensor&, int64_t) = nullptr;
  Tensor (*logsumexp)(const Tensor&, int64_t, bool) = nullptr;
  Tensor (*softmax_shift)(const Tensor&) = nullptr;
  Tensor (*sparse_softmax_cross_entropy)(const Tensor&, const Tensor&) = nullptr;
  Tensor (*sparse_softmax_cross_entropy_grad)(const Tensor&, const Tensor&,
                                              const Tensor&) = nullptr;
  Tensor (*one_hot)(const Tensor&, int64_t, DType, double, double) = nullptr;
  LayerNormResult (*layer_norm)(const Tensor&, const Tensor&, const Tensor&, double) = nullptr;
  LayerNormGrad (*layer_norm_grad)(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&) = nullptr;
  Tensor (*transpose)(const Tensor&, const std::vector<int64_t>&) = nullptr;
  Tensor (*concat)(const std::vector<Tensor>&, int64_t) = nullptr;
  Tensor (*slice)(const Tensor&, const std::vector<int64_t>&, const Shape&) = nullptr;
  Tensor (*gather)(const Tensor&, const Tensor&, int64_t) = nullptr;
  Tensor (*pad)(const Tensor&, const std::vector<std::pair<int64_t, int64_t>>&, double) = nullptr;
  Tensor (*scatter_add)(const Shape&, const Tensor&, const Tensor&, int64_t) = nullptr;

  // ---- runtime/element_loops.h ----
  void (*copy_box_elements)(const Tensor&, const std::vector<int64_t>&, Tensor&,
                            const std::vector<int64_t>&, const Shape&) = nullptr;
  void (*reduce_range_elements)(Tensor&, const Tensor&, ReduceOp, int64_t, int64_t) = nullptr;
  void (*reduce_tensors_into)(Tensor&, const std::vector<Tensor>&, ReduceOp) = nullptr;
  void (*fill_value)(Tensor&, double) = nullptr;
  void (*fill_random)(Tensor&, const Shape&, const std::vector<int64_t>&,
                      const RandomSpec&) = nullptr;

  // ---- Host <-> GPU copies (runtime/cuda/transfer.h in a CUDA build) ----
  // A new tensor on `device` holding `host`'s elements, and a new host tensor (CPU:0) holding a
  // GPU tensor's; called through copy_to_gpu and copy_to_host below.
  Tensor (*copy_to_gpu)(const Tensor&, const Device&) = nullptr;
  Tensor (*copy_to_host)(const Tensor&) = nullptr;

  // ---- kernels/optimizer_update.h ----
  void (*sgd_update)(const Tensor&, const Tensor&, Tensor&, double) = nullptr;
  void (*sgd_momentum_update)(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, double,
                              double, bool) = nullptr;
  void (*adam_update)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                      Tensor&, const AdamStepParams&) = nullptr;

  // CNN ops (conv.cc, pool.cc, lrn.cc).
  Tensor (*conv2d)(const Tensor&, const Tensor&, const Conv2dParams&) = nullptr;
  Tensor (*conv2d_backprop_input)(const Shape&, const Tensor&, const Tensor&,
                                  const Conv2dParams&) = nullptr;
  Tensor (*conv2d_backprop_filter)(const Tensor&, const Shape&, const Tensor&,
                                   const Conv2dParams&) = nullptr;
  Tensor (*max_pool2d)(const Tensor&, const Pool2dParams&) = nullptr;
  Tensor (*max_pool2d_grad)(const Tensor&, const Tensor&, const Pool2dParams&) = nullptr;
  Tensor (*avg_pool2d)(const Tensor&, const Pool2dParams&) = nullptr;
  Tensor (*avg_pool2d_grad)(const Shape&, const Tensor&, const Pool2dParams&) = nullptr;
  Tensor (*local_response_normalization)(const Tensor&, const LrnParams&) = nullptr;
  Tensor (*local_response_normalization_grad)(const Tensor&, const Tensor&,
                                              const LrnParams&) = nullptr;
};

// The registered entries: every entry null until a backend's static initializer fills its own.
// Constant-initialized, so a registration from any translation unit's initializer finds it.
inline Table registered_table{};

// UnimplementedError "[op] has no GPU kernel in this build".
[[noreturn]] void throw_no_kernel(std::string_view op);

// The registered entry `member`, or the error naming `op` (a name or an op enum; see
// kernels/dispatch.h) if there is none.
template <typename F>
inline F* kernel(F* Table::*member, std::string_view op) {
  F* f = registered_table.*member;
  if (f == nullptr) throw_no_kernel(op);
  return f;
}

// Host <-> GPU copies for device-neutral callers (examples) that move host batches onto a GPU
// mesh and read results back.
inline Tensor copy_to_gpu(const Tensor& host, const Device& device) {
  return kernel(&Table::copy_to_gpu, "copy_to_gpu")(host, device);
}
inline Tensor copy_to_host(const Tensor& tensor) {
  return kernel(&Table::copy_to_host, "copy_to_host")(tensor);
}

}  // namespace dtensor::kernels::gpu
