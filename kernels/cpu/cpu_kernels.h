// The CPU implementations of the kernel front (kernels/kernels.h), with its contract: CPU
// tensors in host memory, dense row-major; outputs from the host buffer pool. The front dispatches
// here; CPU kernels call each other directly (no second dispatch). Private to //kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::cpu {

Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double alpha);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options = {});
void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out,
                       const MatmulOptions& options = {});
void set_blas_threads(int n);
Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
             std::optional<UnaryOp> activation, const MatmulOptions& options = {});
Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims);
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);
Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims);
Tensor softmax_shift(const Tensor& max);
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels);
Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& grad);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on = 1.0,
               double off = 0.0);
LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd);
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size);
Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis);
Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
           double value = 0.0);
Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis);

// CNN ops (conv.cc, pool.cc, lrn.cc).
Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& params);
Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                             const Conv2dParams& params);
Tensor conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                              const Conv2dParams& params);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d_grad(const Shape& x_shape, const Tensor& dy, const Pool2dParams& params);
Tensor local_response_normalization(const Tensor& x, const LrnParams& params);
Tensor local_response_normalization_grad(const Tensor& x, const Tensor& dy,
                                         const LrnParams& params);

}  // namespace dtensor::kernels::cpu
