// The GPU half of the kernel front in a build without CUDA: every function throws, naming the op.
// The definitions are weak: a GPU test or bench of the default build links the CUDA kernels
// (//kernels/cuda) statically beside this stub, and theirs take precedence.
#include <string>
#include <string_view>

#include "kernels/gpu/gpu_kernels.h"
#include "runtime/error.h"

namespace dtensor::kernels::gpu {
namespace {

[[noreturn]] void not_built(std::string_view op) {
  throw_error<UnimplementedError>(std::string(op),
                                  "GPU kernels are not built into this binary (built without "
                                  "CUDA)");
}

}  // namespace

[[gnu::weak]] Tensor unary(UnaryOp op, const Tensor&) { not_built(unary_op_name(op)); }

[[gnu::weak]] Tensor binary(BinaryOp op, const Tensor&, const Tensor&) {
  not_built(binary_op_name(op));
}

[[gnu::weak]] Tensor scale(const Tensor&, double) { not_built("scale"); }

[[gnu::weak]] Tensor where(const Tensor&, const Tensor&, const Tensor&) { not_built("where"); }

[[gnu::weak]] Tensor cast(const Tensor&, DType) { not_built("cast"); }

[[gnu::weak]] Tensor broadcast_to(const Tensor&, const Shape&) { not_built("broadcast_to"); }

[[gnu::weak]] Tensor sum_to(const Tensor&, const Shape&) { not_built("sum_to"); }

[[gnu::weak]] Tensor matmul(const Tensor&, const Tensor&, const MatmulOptions&) {
  not_built("matmul");
}

[[gnu::weak]] void matmul_accumulate(const Tensor&, const Tensor&, Tensor&, const MatmulOptions&) {
  not_built("matmul_accumulate");
}

[[gnu::weak]] Tensor dense(const Tensor&, const Tensor&, const Tensor*, std::optional<UnaryOp>,
                           const MatmulOptions&) {
  not_built("dense");
}

[[gnu::weak]] Tensor reduce(ReduceKind kind, const Tensor&, const std::vector<int64_t>&, bool) {
  not_built(reduce_kind_name(kind));
}

[[gnu::weak]] Tensor argmax(const Tensor&, int64_t, bool) { not_built("argmax"); }

[[gnu::weak]] Tensor argmin(const Tensor&, int64_t, bool) { not_built("argmin"); }

[[gnu::weak]] Tensor softmax(const Tensor&, int64_t) { not_built("softmax"); }

[[gnu::weak]] Tensor log_softmax(const Tensor&, int64_t) { not_built("log_softmax"); }

[[gnu::weak]] Tensor logsumexp(const Tensor&, int64_t, bool) { not_built("logsumexp"); }

[[gnu::weak]] Tensor softmax_shift(const Tensor&) { not_built("softmax_shift"); }

[[gnu::weak]] Tensor sparse_softmax_cross_entropy(const Tensor&, const Tensor&) {
  not_built("sparse_softmax_cross_entropy");
}

[[gnu::weak]] Tensor sparse_softmax_cross_entropy_grad(const Tensor&, const Tensor&,
                                                       const Tensor&) {
  not_built("sparse_softmax_cross_entropy_grad");
}

[[gnu::weak]] Tensor one_hot(const Tensor&, int64_t, DType, double, double) {
  not_built("one_hot");
}

[[gnu::weak]] LayerNormResult layer_norm(const Tensor&, const Tensor&, const Tensor&, double) {
  not_built("layer_norm");
}

[[gnu::weak]] LayerNormGrad layer_norm_grad(const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&) {
  not_built("layer_norm_grad");
}

[[gnu::weak]] Tensor transpose(const Tensor&, const std::vector<int64_t>&) {
  not_built("transpose");
}

[[gnu::weak]] Tensor concat(const std::vector<Tensor>&, int64_t) { not_built("concat"); }

[[gnu::weak]] Tensor slice(const Tensor&, const std::vector<int64_t>&, const Shape&) {
  not_built("slice");
}

[[gnu::weak]] Tensor gather(const Tensor&, const Tensor&, int64_t) { not_built("gather"); }

[[gnu::weak]] Tensor pad(const Tensor&, const std::vector<std::pair<int64_t, int64_t>>&, double) {
  not_built("pad");
}

[[gnu::weak]] Tensor scatter_add(const Shape&, const Tensor&, const Tensor&, int64_t) {
  not_built("scatter_add");
}

[[gnu::weak]] void copy_box_elements(const Tensor&, const std::vector<int64_t>&, Tensor&,
                                     const std::vector<int64_t>&, const Shape&) {
  not_built("copy_box");
}
[[gnu::weak]] void reduce_range_elements(Tensor&, const Tensor&, ReduceOp, int64_t, int64_t) {
  not_built("reduce_into");
}
[[gnu::weak]] void reduce_tensors_into(Tensor&, const std::vector<Tensor>&, ReduceOp) {
  not_built("reduce_tensors");
}
[[gnu::weak]] void fill_value(Tensor&, double) { not_built("fill"); }
[[gnu::weak]] void fill_random(Tensor&, const Shape&, const std::vector<int64_t>&,
                               const RandomSpec& spec) {
  not_built(spec.distribution == RandomDistribution::kUniform  ? "random_uniform"
            : spec.distribution == RandomDistribution::kNormal ? "random_normal"
                                                               : "truncated_normal");
}

[[gnu::weak]] Tensor copy_to_gpu(const Tensor&, const Device&) { not_built("copy_to_gpu"); }
[[gnu::weak]] Tensor copy_to_host(const Tensor&) { not_built("copy_to_host"); }

[[gnu::weak]] void sgd_update(const Tensor&, const Tensor&, Tensor&, double) { not_built("SGD"); }
[[gnu::weak]] void sgd_momentum_update(const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                       Tensor&, double, double, bool) {
  not_built("SGD");
}
[[gnu::weak]] void adam_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                               Tensor&, Tensor&, const AdamStepParams&) {
  not_built("Adam");
}

// CNN ops.
[[gnu::weak]] Tensor conv2d(const Tensor&, const Tensor&, const Conv2dParams&) {
  not_built("conv2d");
}
[[gnu::weak]] Tensor conv2d_backprop_input(const Shape&, const Tensor&, const Tensor&,
                                           const Conv2dParams&) {
  not_built("conv2d_backprop_input");
}
[[gnu::weak]] Tensor conv2d_backprop_filter(const Tensor&, const Shape&, const Tensor&,
                                            const Conv2dParams&) {
  not_built("conv2d_backprop_filter");
}
[[gnu::weak]] Tensor max_pool2d(const Tensor&, const Pool2dParams&) { not_built("max_pool2d"); }
[[gnu::weak]] Tensor max_pool2d_grad(const Tensor&, const Tensor&, const Pool2dParams&) {
  not_built("max_pool2d_grad");
}
[[gnu::weak]] Tensor avg_pool2d(const Tensor&, const Pool2dParams&) { not_built("avg_pool2d"); }
[[gnu::weak]] Tensor avg_pool2d_grad(const Shape&, const Tensor&, const Pool2dParams&) {
  not_built("avg_pool2d_grad");
}
[[gnu::weak]] Tensor local_response_normalization(const Tensor&, const LrnParams&) {
  not_built("local_response_normalization");
}
[[gnu::weak]] Tensor local_response_normalization_grad(const Tensor&, const Tensor&,
                                                       const LrnParams&) {
  not_built("local_response_normalization_grad");
}

}  // namespace dtensor::kernels::gpu
