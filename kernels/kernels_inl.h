// The inline definitions of the kernel front declared in kernels.h: one switch on the inputs'
// device type per call, compiled into the caller so that a CPU kernel costs one direct call as
// before; a GPU kernel is one load from the GPU table (gpu/gpu_kernels.h) and an indirect call.
// Included by kernels.h only.
#pragma once

#include "kernels/checks.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels {

inline Tensor unary(UnaryOp op, const Tensor& x) {
  return dispatch::on(
      dispatch::device_type_of(op, x), [&] { return cpu::unary(op, x); },
      [&] { return gpu::kernel(&gpu::Table::unary, dispatch::op_name(op))(op, x); });
}

inline Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  return dispatch::on(
      dispatch::device_type_of(op, a, b), [&] { return cpu::binary(op, a, b); },
      [&] { return gpu::kernel(&gpu::Table::binary, dispatch::op_name(op))(op, a, b); });
}

inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  return checks::broadcast_shapes(a, b, op);
}

inline Tensor scale(const Tensor& x, double alpha) {
  return dispatch::on(
      dispatch::device_type_of("scale", x), [&] { return cpu::scale(x, alpha); },
      [&] { return gpu::kernel(&gpu::Table::scale, "scale")(x, alpha); });
}

inline Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return dispatch::on(
      dispatch::device_type_of("where", cond, a, b), [&] { return cpu::where(cond, a, b); },
      [&] { return gpu::kernel(&gpu::Table::where, "where")(cond, a, b); });
}

inline Tensor cast(const Tensor& x, DType dtype) {
  return dispatch::on(
      dispatch::device_type_of("cast", x), [&] { return cpu::cast(x, dtype); },
      [&] { return gpu::kernel(&gpu::Table::cast, "cast")(x, dtype); });
}

inline Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  return dispatch::on(
      dispatch::device_type_of("broadcast_to", x), [&] { return cpu::broadcast_to(x, shape); },
      [&] { return gpu::kernel(&gpu::Table::broadcast_to, "broadcast_to")(x, shape); });
}

inline Tensor sum_to(const Tensor& x, const Shape& shape) {
  return dispatch::on(
      dispatch::device_type_of("sum_to", x), [&] { return cpu::sum_to(x, shape); },
      [&] { return gpu::kernel(&gpu::Table::sum_to, "sum_to")(x, shape); });
}

inline Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  return dispatch::on(
      dispatch::device_type_of("matmul", a, b), [&] { return cpu::matmul(a, b, options); },
      [&] { return gpu::kernel(&gpu::Table::matmul, "matmul")(a, b, options); });
}

inline void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out,
                              const MatmulOptions& options) {
  return dispatch::on(
      dispatch::device_type_of("matmul_accumulate", a, b, out),
      [&] { return cpu::matmul_accumulate(a, b, out, options); },
      [&] {
        return gpu::kernel(&gpu::Table::matmul_accumulate, "matmul_accumulate")(a, b, out, options);
      });
}

inline void set_blas_threads(int n) { return cpu::set_blas_threads(n); }

inline Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
                    std::optional<UnaryOp> activation, const MatmulOptions& options) {
  return dispatch::on(
      dispatch::device_type_of("dense", x, w, bias),
      [&] { return cpu::dense(x, w, bias, activation, options); },
      [&] { return gpu::kernel(&gpu::Table::dense, "dense")(x, w, bias, activation, options); });
}

inline Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes,
                     bool keepdims) {
  return dispatch::on(
      dispatch::device_type_of(kind, x), [&] { return cpu::reduce(kind, x, axes, keepdims); },
      [&] {
        return gpu::kernel(&gpu::Table::reduce, dispatch::op_name(kind))(kind, x, axes, keepdims);
      });
}

inline Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  return dispatch::on(
      dispatch::device_type_of("argmax", x), [&] { return cpu::argmax(x, axis, keepdims); },
      [&] { return gpu::kernel(&gpu::Table::argmax, "argmax")(x, axis, keepdims); });
}

inline Tensor argmin(const Tensor& x, int64_t axis, bool keepdims) {
  return dispatch::on(
      dispatch::device_type_of("argmin", x), [&] { return cpu::argmin(x, axis, keepdims); },
      [&] { return gpu::kernel(&gpu::Table::argmin, "argmin")(x, axis, keepdims); });
}

inline Tensor softmax(const Tensor& x, int64_t axis) {
  return dispatch::on(
      dispatch::device_type_of("softmax", x), [&] { return cpu::softmax(x, axis); },
      [&] { return gpu::kernel(&gpu::Table::softmax, "softmax")(x, axis); });
}

inline Tensor log_softmax(const Tensor& x, int64_t axis) {
  return dispatch::on(
      dispatch::device_type_of("log_softmax", x), [&] { return cpu::log_softmax(x, axis); },
      [&] { return gpu::kernel(&gpu::Table::log_softmax, "log_softmax")(x, axis); });
}

inline Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims) {
  return dispatch::on(
      dispatch::device_type_of("logsumexp", x), [&] { return cpu::logsumexp(x, axis, keepdims); },
      [&] { return gpu::kernel(&gpu::Table::logsumexp, "logsumexp")(x, axis, keepdims); });
}

inline Tensor softmax_shift(const Tensor& max) {
  return dispatch::on(
      dispatch::device_type_of("softmax_shift", max), [&] { return cpu::softmax_shift(max); },
      [&] { return gpu::kernel(&gpu::Table::softmax_shift, "softmax_shift")(max); });
}

inline Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels) {
  const DeviceType type = dispatch::device_type_of("sparse_softmax_cross_entropy", logits, labels);
  checks::cross_entropy("sparse_softmax_cross_entropy", logits, labels);
  return dispatch::on(
      type, [&] { return cpu::sparse_softmax_cross_entropy(logits, labels); },
      [&] {
        return gpu::kernel(&gpu::Table::sparse_softmax_cross_entropy,
                           "sparse_softmax_cross_entropy")(logits, labels);
      });
}

inline Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                                const Tensor& grad) {
  const DeviceType type =
      dispatch::device_type_of("sparse_softmax_cross_entropy_grad", logits, labels, grad);
  checks::cross_entropy_grad("sparse_softmax_cross_entropy_grad", logits, labels, grad);
  return dispatch::on(
      type, [&] { return cpu::sparse_softmax_cross_entropy_grad(logits, labels, grad); },
      [&] {
        return gpu::kernel(&gpu::Table::sparse_softmax_cross_entropy_grad,
                           "sparse_softmax_cross_entropy_grad")(logits, labels, grad);
      });
}

inline Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on, double off) {
  checks::one_hot(indices, depth);
  return dispatch::on(
      indices.device().type, [&] { return cpu::one_hot(indices, depth, dtype, on, off); },
      [&] { return gpu::kernel(&gpu::Table::one_hot, "one_hot")(indices, depth, dtype, on, off); });
}

inline LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  double eps) {
  return dispatch::on(
      dispatch::device_type_of("layer_norm", x, gamma, beta),
      [&] { return cpu::layer_norm(x, gamma, beta, eps); },
      [&] { return gpu::kernel(&gpu::Table::layer_norm, "layer_norm")(x, gamma, beta, eps); });
}

inline LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd) {
  return dispatch::on(
      dispatch::device_type_of("layer_norm_grad", dy, x, gamma, mean, rstd),
      [&] { return cpu::layer_norm_grad(dy, x, gamma, mean, rstd); },
      [&] {
        return gpu::kernel(&gpu::Table::layer_norm_grad, "layer_norm_grad")(dy, x, gamma, mean,
                                                                            rstd);
      });
}

inline Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  return dispatch::on(
      dispatch::device_type_of("transpose", x), [&] { return cpu::transpose(x, perm); },
      [&] { return gpu::kernel(&gpu::Table::transpose, "transpose")(x, perm); });
}

inline Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  return dispatch::on(
      xs.empty() ? DeviceType::kCPU : dispatch::device_type_of("concat", xs),
      [&] { return cpu::concat(xs, axis); },
      [&] { return gpu::kernel(&gpu::Table::concat, "concat")(xs, axis); });
}

inline Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  return dispatch::on(
      dispatch::device_type_of("slice", x), [&] { return cpu::slice(x, begin, size); },
      [&] { return gpu::kernel(&gpu::Table::slice, "slice")(x, begin, size); });
}

inline Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis) {
  return dispatch::on(
      dispatch::device_type_of("gather", params, indices),
      [&] { return cpu::gather(params, indices, axis); },
      [&] { return gpu::kernel(&gpu::Table::gather, "gather")(params, indices, axis); });
}

inline Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
                  double value) {
  return dispatch::on(
      dispatch::device_type_of("pad", x), [&] { return cpu::pad(x, paddings, value); },
      [&] { return gpu::kernel(&gpu::Table::pad, "pad")(x, paddings, value); });
}

inline Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates,
                          int64_t axis) {
  return dispatch::on(
      dispatch::device_type_of("scatter_add", updates, indices),
      [&] { return cpu::scatter_add(shape, indices, updates, axis); },
      [&] {
        return gpu::kernel(&gpu::Table::scatter_add, "scatter_add")(shape, indices, updates, axis);
      });
}

// ---- CNN ops ----

inline Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("conv2d", x, w), [&] { return cpu::conv2d(x, w, params); },
      [&] { return gpu::kernel(&gpu::Table::conv2d, "conv2d")(x, w, params); });
}

inline Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                                    const Conv2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("conv2d_backprop_input", w, dy),
      [&] { return cpu::conv2d_backprop_input(x_shape, w, dy, params); },
      [&] {
        return gpu::kernel(&gpu::Table::conv2d_backprop_input, "conv2d_backprop_input")(x_shape, w,
                                                                                        dy, params);
      });
}

inline Tensor conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                                     const Conv2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("conv2d_backprop_filter", x, dy),
      [&] { return cpu::conv2d_backprop_filter(x, w_shape, dy, params); },
      [&] {
        return gpu::kernel(&gpu::Table::conv2d_backprop_filter, "conv2d_backprop_filter")(
            x, w_shape, dy, params);
      });
}

inline Tensor max_pool2d(const Tensor& x, const Pool2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("max_pool2d", x), [&] { return cpu::max_pool2d(x, params); },
      [&] { return gpu::kernel(&gpu::Table::max_pool2d, "max_pool2d")(x, params); });
}

inline Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("max_pool2d_grad", x, dy),
      [&] { return cpu::max_pool2d_grad(x, dy, params); },
      [&] { return gpu::kernel(&gpu::Table::max_pool2d_grad, "max_pool2d_grad")(x, dy, params); });
}

inline Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("avg_pool2d", x), [&] { return cpu::avg_pool2d(x, params); },
      [&] { return gpu::kernel(&gpu::Table::avg_pool2d, "avg_pool2d")(x, params); });
}

inline Tensor avg_pool2d_grad(const Shape& x_shape, const Tensor& dy, const Pool2dParams& params) {
  return dispatch::on(
      dispatch::device_type_of("avg_pool2d_grad", dy),
      [&] { return cpu::avg_pool2d_grad(x_shape, dy, params); },
      [&] {
        return gpu::kernel(&gpu::Table::avg_pool2d_grad, "avg_pool2d_grad")(x_shape, dy, params);
      });
}

inline Tensor local_response_normalization(const Tensor& x, const LrnParams& params) {
  return dispatch::on(
      dispatch::device_type_of("local_response_normalization", x),
      [&] { return cpu::local_response_normalization(x, params); },
      [&] {
        return gpu::kernel(&gpu::Table::local_response_normalization,
                           "local_response_normalization")(x, params);
      });
}

inline Tensor local_response_normalization_grad(const Tensor& x, const Tensor& dy,
                                                const LrnParams& params) {
  return dispatch::on(
      dispatch::device_type_of("local_response_normalization_grad", x, dy),
      [&] { return cpu::local_response_normalization_grad(x, dy, params); },
      [&] {
        return gpu::kernel(&gpu::Table::local_response_normalization_grad,
                           "local_response_normalization_grad")(x, dy, params);
      });
}

}  // namespace dtensor::kernels
