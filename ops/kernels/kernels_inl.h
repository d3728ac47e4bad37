// The inline definitions of the kernel front declared in kernels.h: one switch on the inputs'
// device type per call, compiled into the caller so that a CPU kernel costs one direct call as
// before. Included by kernels.h only.
#pragma once

#include "ops/kernels/cpu/cpu_kernels.h"
#include "ops/kernels/dispatch.h"
#include "ops/kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels {

inline Tensor unary(UnaryOp op, const Tensor& x) {
  switch (dispatch::device_type_of(op, x)) {
    case DeviceType::kCPU:
      return cpu::unary(op, x);
    case DeviceType::kGPU:
      break;
  }
  return gpu::unary(op, x);
}

inline Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (dispatch::device_type_of(op, a, b)) {
    case DeviceType::kCPU:
      return cpu::binary(op, a, b);
    case DeviceType::kGPU:
      break;
  }
  return gpu::binary(op, a, b);
}

inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  return cpu::broadcast_shapes(a, b, op);
}

inline Tensor scale(const Tensor& x, double alpha) {
  switch (dispatch::device_type_of("scale", x)) {
    case DeviceType::kCPU:
      return cpu::scale(x, alpha);
    case DeviceType::kGPU:
      break;
  }
  return gpu::scale(x, alpha);
}

inline Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  switch (dispatch::device_type_of("where", cond, a, b)) {
    case DeviceType::kCPU:
      return cpu::where(cond, a, b);
    case DeviceType::kGPU:
      break;
  }
  return gpu::where(cond, a, b);
}

inline Tensor cast(const Tensor& x, DType dtype) {
  switch (dispatch::device_type_of("cast", x)) {
    case DeviceType::kCPU:
      return cpu::cast(x, dtype);
    case DeviceType::kGPU:
      break;
  }
  return gpu::cast(x, dtype);
}

inline Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  switch (dispatch::device_type_of("broadcast_to", x)) {
    case DeviceType::kCPU:
      return cpu::broadcast_to(x, shape);
    case DeviceType::kGPU:
      break;
  }
  return gpu::broadcast_to(x, shape);
}

inline Tensor sum_to(const Tensor& x, const Shape& shape) {
  switch (dispatch::device_type_of("sum_to", x)) {
    case DeviceType::kCPU:
      return cpu::sum_to(x, shape);
    case DeviceType::kGPU:
      break;
  }
  return gpu::sum_to(x, shape);
}

inline Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  switch (dispatch::device_type_of("matmul", a, b)) {
    case DeviceType::kCPU:
      return cpu::matmul(a, b, options);
    case DeviceType::kGPU:
      break;
  }
  return gpu::matmul(a, b, options);
}

inline void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out,
                              const MatmulOptions& options) {
  switch (dispatch::device_type_of("matmul_accumulate", a, b, out)) {
    case DeviceType::kCPU:
      return cpu::matmul_accumulate(a, b, out, options);
    case DeviceType::kGPU:
      break;
  }
  return gpu::matmul_accumulate(a, b, out, options);
}

inline void set_blas_threads(int n) { return cpu::set_blas_threads(n); }

inline Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
                    std::optional<UnaryOp> activation, const MatmulOptions& options) {
  switch (dispatch::device_type_of("dense", x, w, bias)) {
    case DeviceType::kCPU:
      return cpu::dense(x, w, bias, activation, options);
    case DeviceType::kGPU:
      break;
  }
  return gpu::dense(x, w, bias, activation, options);
}

inline Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes,
                     bool keepdims) {
  switch (dispatch::device_type_of(kind, x)) {
    case DeviceType::kCPU:
      return cpu::reduce(kind, x, axes, keepdims);
    case DeviceType::kGPU:
      break;
  }
  return gpu::reduce(kind, x, axes, keepdims);
}

inline Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  switch (dispatch::device_type_of("argmax", x)) {
    case DeviceType::kCPU:
      return cpu::argmax(x, axis, keepdims);
    case DeviceType::kGPU:
      break;
  }
  return gpu::argmax(x, axis, keepdims);
}

inline Tensor argmin(const Tensor& x, int64_t axis, bool keepdims) {
  switch (dispatch::device_type_of("argmin", x)) {
    case DeviceType::kCPU:
      return cpu::argmin(x, axis, keepdims);
    case DeviceType::kGPU:
      break;
  }
  return gpu::argmin(x, axis, keepdims);
}

inline Tensor softmax(const Tensor& x, int64_t axis) {
  switch (dispatch::device_type_of("softmax", x)) {
    case DeviceType::kCPU:
      return cpu::softmax(x, axis);
    case DeviceType::kGPU:
      break;
  }
  return gpu::softmax(x, axis);
}

inline Tensor log_softmax(const Tensor& x, int64_t axis) {
  switch (dispatch::device_type_of("log_softmax", x)) {
    case DeviceType::kCPU:
      return cpu::log_softmax(x, axis);
    case DeviceType::kGPU:
      break;
  }
  return gpu::log_softmax(x, axis);
}

inline Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims) {
  switch (dispatch::device_type_of("logsumexp", x)) {
    case DeviceType::kCPU:
      return cpu::logsumexp(x, axis, keepdims);
    case DeviceType::kGPU:
      break;
  }
  return gpu::logsumexp(x, axis, keepdims);
}

inline Tensor softmax_shift(const Tensor& max) {
  switch (dispatch::device_type_of("softmax_shift", max)) {
    case DeviceType::kCPU:
      return cpu::softmax_shift(max);
    case DeviceType::kGPU:
      break;
  }
  return gpu::softmax_shift(max);
}

inline Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels) {
  switch (dispatch::device_type_of("sparse_softmax_cross_entropy", logits, labels)) {
    case DeviceType::kCPU:
      return cpu::sparse_softmax_cross_entropy(logits, labels);
    case DeviceType::kGPU:
      break;
  }
  return gpu::sparse_softmax_cross_entropy(logits, labels);
}

inline Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                                const Tensor& grad) {
  switch (dispatch::device_type_of("sparse_softmax_cross_entropy_grad", logits, labels, grad)) {
    case DeviceType::kCPU:
      return cpu::sparse_softmax_cross_entropy_grad(logits, labels, grad);
    case DeviceType::kGPU:
      break;
  }
  return gpu::sparse_softmax_cross_entropy_grad(logits, labels, grad);
}

inline Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on, double off) {
  switch (dispatch::device_type_of("one_hot", indices)) {
    case DeviceType::kCPU:
      return cpu::one_hot(indices, depth, dtype, on, off);
    case DeviceType::kGPU:
      break;
  }
  return gpu::one_hot(indices, depth, dtype, on, off);
}

inline LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  double eps) {
  switch (dispatch::device_type_of("layer_norm", x, gamma, beta)) {
    case DeviceType::kCPU:
      return cpu::layer_norm(x, gamma, beta, eps);
    case DeviceType::kGPU:
      break;
  }
  return gpu::layer_norm(x, gamma, beta, eps);
}

inline LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd) {
  switch (dispatch::device_type_of("layer_norm_grad", dy, x, gamma, mean, rstd)) {
    case DeviceType::kCPU:
      return cpu::layer_norm_grad(dy, x, gamma, mean, rstd);
    case DeviceType::kGPU:
      break;
  }
  return gpu::layer_norm_grad(dy, x, gamma, mean, rstd);
}

inline Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  switch (dispatch::device_type_of("transpose", x)) {
    case DeviceType::kCPU:
      return cpu::transpose(x, perm);
    case DeviceType::kGPU:
      break;
  }
  return gpu::transpose(x, perm);
}

inline Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  switch (xs.empty() ? DeviceType::kCPU : dispatch::device_type_of("concat", xs)) {
    case DeviceType::kCPU:
      return cpu::concat(xs, axis);
    case DeviceType::kGPU:
      break;
  }
  return gpu::concat(xs, axis);
}

inline Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  switch (dispatch::device_type_of("slice", x)) {
    case DeviceType::kCPU:
      return cpu::slice(x, begin, size);
    case DeviceType::kGPU:
      break;
  }
  return gpu::slice(x, begin, size);
}

inline Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis) {
  switch (dispatch::device_type_of("gather", params, indices)) {
    case DeviceType::kCPU:
      return cpu::gather(params, indices, axis);
    case DeviceType::kGPU:
      break;
  }
  return gpu::gather(params, indices, axis);
}

inline Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
                  double value) {
  switch (dispatch::device_type_of("pad", x)) {
    case DeviceType::kCPU:
      return cpu::pad(x, paddings, value);
    case DeviceType::kGPU:
      break;
  }
  return gpu::pad(x, paddings, value);
}

inline Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates,
                          int64_t axis) {
  switch (dispatch::device_type_of("scatter_add", updates, indices)) {
    case DeviceType::kCPU:
      return cpu::scatter_add(shape, indices, updates, axis);
    case DeviceType::kGPU:
      break;
  }
  return gpu::scatter_add(shape, indices, updates, axis);
}

}  // namespace dtensor::kernels
