// Reductions, the softmax family, cross-entropy, one_hot and layer_norm on the GPU. bf16 inputs
// go through f32 (to_f32 / to_bf16), as the CPU kernels do.
#include <algorithm>

#include "kernels/cuda/internal.h"
#include "kernels/cuda/registration.h"
#include "kernels/gpu/gpu_kernels.h"
#include "runtime/cuda/transfer.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

// The reduction codes the launchers take (launch.h) are ReduceKind's values.
static_assert(cuda_launch::reduce_kind::kSum == static_cast<int>(ReduceKind::kSum));
static_assert(cuda_launch::reduce_kind::kMean == static_cast<int>(ReduceKind::kMean));
static_assert(cuda_launch::reduce_kind::kMax == static_cast<int>(ReduceKind::kMax));
static_assert(cuda_launch::reduce_kind::kMin == static_cast<int>(ReduceKind::kMin));
static_assert(cuda_launch::reduce_kind::kProd == static_cast<int>(ReduceKind::kProd));

namespace {

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisView around(const Shape& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) v.outer *= shape[static_cast<size_t>(d)];
    if (d == axis) v.n = shape[static_cast<size_t>(d)];
    if (d > axis) v.inner *= shape[static_cast<size_t>(d)];
  }
  return v;
}

Shape reduced_shape(const Shape& shape, int64_t axis, bool keepdims) {
  Shape out = shape;
  if (keepdims) {
    out[static_cast<size_t>(axis)] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return out;
}

void require_float(const char* op, const Tensor& x) {
  if (!is_floating(x.dtype())) throw_unsupported(op, x);
}

}  // namespace

Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  const std::string name(reduce_kind_name(kind));
  const char* op = name.c_str();
  if (x.dtype() == DType::kBool && kind != ReduceKind::kMax && kind != ReduceKind::kMin) {
    throw_unsupported(op, x);
  }
  const int64_t rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    const int64_t d = normalize_axis(op, a, x);
    if (reduced[static_cast<size_t>(d)]) {
      throw_error<InvalidArgumentError>(op, "axis {} appears twice", a);
    }
    reduced[static_cast<size_t>(d)] = true;
  }
  const std::vector<int64_t> strides = strides_of(x.shape());
  Shape out_shape, kept_dims, red_dims;
  StridedIndex kept, red;
  for (int64_t d = 0; d < rank; ++d) {
    const size_t i = static_cast<size_t>(d);
    if (reduced[i]) {
      if (keepdims) out_shape.push_back(1);
      red.dims[red.rank] = x.shape()[i];
      red.strides[red.rank++] = strides[i];
    } else {
      out_shape.push_back(x.shape()[i]);
      kept.dims[kept.rank] = x.shape()[i];
      kept.strides[kept.rank++] = strides[i];
    }
  }
  int64_t per_output = 1;
  for (int d = 0; d < red.rank; ++d) per_output *= red.dims[d];
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  contiguous(x.shape(), op);  // rank check
  cuda_launch::reduce(static_cast<int>(kind), code(x.dtype()), x.raw_data(), kept, red,
                      out.raw_data(), out.num_elements(), per_output, stream_of(x, op));
  return out;
}

namespace {
Tensor arg_reduce(const char* op, bool is_max, const Tensor& x, int64_t axis, bool keepdims) {
  if (x.dtype() == DType::kBool) throw_unsupported(op, x);
  const int64_t ax = normalize_axis(op, axis, x);
  if (x.shape()[static_cast<size_t>(ax)] == 0) {
    throw_error<InvalidArgumentError>(op, "axis {} of {} is empty", axis, describe(x));
  }
  const AxisView v = around(x.shape(), ax);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), ax, keepdims), DType::kI64, x.device());
  cuda_launch::arg_reduce(is_max, code(x.dtype()), x.raw_data(), v.outer, v.n, v.inner,
                          out.raw_data(), stream_of(x, op));
  return out;
}

Tensor softmax_op(const char* op, int mode, const Tensor& x, int64_t axis, bool keepdims) {
  require_float(op, x);
  const int64_t ax = normalize_axis(op, axis, x);
  if (x.dtype() == DType::kBF16) return to_bf16(softmax_op(op, mode, to_f32(x), axis, keepdims));
  const AxisView v = around(x.shape(), ax);
  Tensor out = Tensor::empty(mode == cuda_launch::softmax_mode::kLogSumExp ? reduced_shape(x.shape(), ax, keepdims) : x.shape(),
                             x.dtype(), x.device());
  cuda_launch::softmax(mode, code(x.dtype()), x.raw_data(), v.outer, v.n, v.inner, out.raw_data(),
                       stream_of(x, op));
  return out;
}

}  // namespace

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  return arg_reduce("argmax", true, x, axis, keepdims);
}

Tensor argmin(const Tensor& x, int64_t axis, bool keepdims) {
  return arg_reduce("argmin", false, x, axis, keepdims);
}

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_op("softmax", cuda_launch::softmax_mode::kSoftmax, x, axis, false); }

Tensor log_softmax(const Tensor& x, int64_t axis) {
  return softmax_op("log_softmax", cuda_launch::softmax_mode::kLogSoftmax, x, axis, false);
}

Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims) {
  return softmax_op("logsumexp", cuda_launch::softmax_mode::kLogSumExp, x, axis, keepdims);
}

Tensor softmax_shift(const Tensor& max) {
  require_float("softmax_shift", max);
  if (max.dtype() == DType::kBF16) return to_bf16(softmax_shift(to_f32(max)));
  Tensor out = Tensor::empty(max.shape(), max.dtype(), max.device());
  cuda_launch::softmax_shift(code(max.dtype()), max.raw_data(), out.raw_data(), max.num_elements(),
                             stream_of(max, "softmax_shift"));
  return out;
}

Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels) {
  const char* op = "sparse_softmax_cross_entropy";
  if (logits.dtype() == DType::kBF16) {
    return to_bf16(sparse_softmax_cross_entropy(to_f32(logits), labels));
  }
  Tensor loss = Tensor::empty(labels.shape(), logits.dtype(), logits.device());
  Tensor bad = make_flag(logits);
  const int64_t classes = logits.shape().back();
  cuda_launch::sparse_xent(code(logits.dtype()), logits.raw_data(), code(labels.dtype()),
                           labels.raw_data(), labels.num_elements(), classes, loss.raw_data(),
                           static_cast<int64_t*>(bad.raw_data()), stream_of(logits, op));
  // Labels are checked on the device; the host reads one int64 back (a sync per call, which the
  // loss's consumer would pay anyway).
  const int64_t row = read_flag(static_cast<const int64_t*>(bad.raw_data()), logits);
  if (row >= 0) {
    int64_t label = 0;
    const size_t size = dtype_size(labels.dtype());
    cuda::copy_to_host(&label, static_cast<const char*>(labels.raw_data()) + row * size, size,
                       labels.device());
    if (size == 4) label = static_cast<int32_t>(label);
    throw_error<InvalidArgumentError>(op, "label {} at position {} is outside [0, {})", label, row,
                                      classes);
  }
  return loss;
}

Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& grad) {
  const char* op = "sparse_softmax_cross_entropy_grad";
  if (logits.dtype() == DType::kBF16) {
    return to_bf16(sparse_softmax_cross_entropy_grad(to_f32(logits), labels, to_f32(grad)));
  }
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  cuda_launch::sparse_xent_grad(code(logits.dtype()), logits.raw_data(), code(labels.dtype()),
                                labels.raw_data(), grad.raw_data(), labels.num_elements(),
                                logits.shape().back(), dx.raw_data(), stream_of(logits, op));
  return dx;
}

Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on, double off) {
  Shape shape = indices.shape();
  shape.push_back(depth);
  Tensor out = Tensor::empty(shape, dtype, indices.device());
  cuda_launch::one_hot(code(indices.dtype()), indices.raw_data(), indices.num_elements(), depth,
                       code(dtype), on, off, out.raw_data(), stream_of(indices, "one_hot"));
  return out;
}

LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const char* op = "layer_norm";
  require_float(op, x);
  if (x.rank() < 1) throw_error<ShapeError>(op, "x must have rank >= 1, got {}", describe(x));
  const int64_t d = x.shape().back();
  for (const Tensor* p : {&gamma, &beta}) {
    if (p->dtype() != x.dtype() || p->shape() != Shape{d}) {
      throw_error<ShapeError>(op, "{} {} does not match x {} (expected {}[{}])",
                              p == &gamma ? "gamma" : "beta", describe(*p), describe(x),
                              dtype_name(x.dtype()), d);
    }
  }
  if (!(eps >= 0)) throw_error<InvalidArgumentError>(op, "eps must be >= 0, got {}", eps);
  if (x.dtype() == DType::kBF16) {
    LayerNormResult r = layer_norm(to_f32(x), to_f32(gamma), to_f32(beta), eps);
    r.y = to_bf16(r.y);
    return r;
  }
  Shape stats = x.shape();
  stats.back() = 1;
  LayerNormResult r{Tensor::empty(x.shape(), x.dtype(), x.device()),
                    Tensor::empty(stats, x.dtype(), x.device()),
                    Tensor::empty(stats, x.dtype(), x.device())};
  cuda_launch::layer_norm(code(x.dtype()), x.raw_data(), gamma.raw_data(), beta.raw_data(), eps,
                          r.mean.num_elements(), d, r.y.raw_data(), code(x.dtype()),
                          r.mean.raw_data(), r.rstd.raw_data(), stream_of(x, op));
  return r;
}

LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_grad";
  require_float(op, x);
  if (dy.dtype() != x.dtype() || dy.shape() != x.shape()) {
    throw_error<ShapeError>(op, "dy {} does not match x {}", describe(dy), describe(x));
  }
  if (x.dtype() == DType::kBF16) {
    LayerNormGrad g = layer_norm_grad(to_f32(dy), to_f32(x), to_f32(gamma), mean, rstd);
    return {to_bf16(g.dx), to_bf16(g.dgamma), to_bf16(g.dbeta)};
  }
  const int64_t d = x.rank() > 0 ? x.shape().back() : 1;
  LayerNormGrad g{Tensor::empty(x.shape(), x.dtype(), x.device()),
                  Tensor::empty(gamma.shape(), x.dtype(), x.device()),
                  Tensor::empty(gamma.shape(), x.dtype(), x.device())};
  cuda_launch::layer_norm_grad(code(x.dtype()), dy.raw_data(), x.raw_data(), gamma.raw_data(),
                               code(mean.dtype()), mean.raw_data(), rstd.raw_data(),
                               mean.num_elements(), d, g.dx.raw_data(), g.dgamma.raw_data(),
                               g.dbeta.raw_data(), stream_of(x, op));
  return g;
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_nn_kernels(Table& table) {
  table.reduce = reduce;
  table.argmax = argmax;
  table.argmin = argmin;
  table.softmax = softmax;
  table.log_softmax = log_softmax;
  table.logsumexp = logsumexp;
  table.softmax_shift = softmax_shift;
  table.sparse_softmax_cross_entropy = sparse_softmax_cross_entropy;
  table.sparse_softmax_cross_entropy_grad = sparse_softmax_cross_entropy_grad;
  table.one_hot = one_hot;
  table.layer_norm = layer_norm;
  table.layer_norm_grad = layer_norm_grad;
}

}  // namespace dtensor::kernels::gpu
