// The GPU half of the kernel front in a build without CUDA: every function throws, naming the op.
#include <string>
#include <string_view>

#include "ops/kernels/gpu/gpu_kernels.h"
#include "runtime/error.h"

namespace dtensor::kernels::gpu {
namespace {

[[noreturn]] void not_built(std::string_view op) {
  throw_error<UnimplementedError>(std::string(op),
                                  "GPU kernels are not built into this binary (built without "
                                  "CUDA)");
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor&) { not_built(unary_op_name(op)); }

Tensor binary(BinaryOp op, const Tensor&, const Tensor&) { not_built(binary_op_name(op)); }

Tensor scale(const Tensor&, double) { not_built("scale"); }

Tensor where(const Tensor&, const Tensor&, const Tensor&) { not_built("where"); }

Tensor cast(const Tensor&, DType) { not_built("cast"); }

Tensor broadcast_to(const Tensor&, const Shape&) { not_built("broadcast_to"); }

Tensor sum_to(const Tensor&, const Shape&) { not_built("sum_to"); }

Tensor matmul(const Tensor&, const Tensor&, const MatmulOptions&) { not_built("matmul"); }

void matmul_accumulate(const Tensor&, const Tensor&, Tensor&, const MatmulOptions&) {
  not_built("matmul_accumulate");
}

Tensor dense(const Tensor&, const Tensor&, const Tensor*, std::optional<UnaryOp>,
             const MatmulOptions&) {
  not_built("dense");
}

Tensor reduce(ReduceKind kind, const Tensor&, const std::vector<int64_t>&, bool) {
  not_built(reduce_kind_name(kind));
}

Tensor argmax(const Tensor&, int64_t, bool) { not_built("argmax"); }

Tensor argmin(const Tensor&, int64_t, bool) { not_built("argmin"); }

Tensor softmax(const Tensor&, int64_t) { not_built("softmax"); }

Tensor log_softmax(const Tensor&, int64_t) { not_built("log_softmax"); }

Tensor logsumexp(const Tensor&, int64_t, bool) { not_built("logsumexp"); }

Tensor softmax_shift(const Tensor&) { not_built("softmax_shift"); }

Tensor sparse_softmax_cross_entropy(const Tensor&, const Tensor&) {
  not_built("sparse_softmax_cross_entropy");
}

Tensor sparse_softmax_cross_entropy_grad(const Tensor&, const Tensor&, const Tensor&) {
  not_built("sparse_softmax_cross_entropy_grad");
}

Tensor one_hot(const Tensor&, int64_t, DType, double, double) { not_built("one_hot"); }

LayerNormResult layer_norm(const Tensor&, const Tensor&, const Tensor&, double) {
  not_built("layer_norm");
}

LayerNormGrad layer_norm_grad(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&) {
  not_built("layer_norm_grad");
}

Tensor transpose(const Tensor&, const std::vector<int64_t>&) { not_built("transpose"); }

Tensor concat(const std::vector<Tensor>&, int64_t) { not_built("concat"); }

Tensor slice(const Tensor&, const std::vector<int64_t>&, const Shape&) { not_built("slice"); }

Tensor gather(const Tensor&, const Tensor&, int64_t) { not_built("gather"); }

Tensor pad(const Tensor&, const std::vector<std::pair<int64_t, int64_t>>&, double) {
  not_built("pad");
}

Tensor scatter_add(const Shape&, const Tensor&, const Tensor&, int64_t) {
  not_built("scatter_add");
}

void copy_box_elements(const Tensor&, const std::vector<int64_t>&, Tensor&,
                       const std::vector<int64_t>&, const Shape&) {
  not_built("copy_box");
}
void reduce_range_elements(Tensor&, const Tensor&, ReduceOp, int64_t, int64_t) {
  not_built("reduce_into");
}
void reduce_tensors_into(Tensor&, const std::vector<Tensor>&, ReduceOp) {
  not_built("reduce_tensors");
}
void fill_value(Tensor&, double) { not_built("fill"); }
void fill_random(Tensor&, const Shape&, const std::vector<int64_t>&, const RandomSpec& spec) {
  not_built(spec.distribution == RandomDistribution::kUniform  ? "random_uniform"
            : spec.distribution == RandomDistribution::kNormal ? "random_normal"
                                                               : "truncated_normal");
}

Tensor copy_to_gpu(const Tensor&, const Device&) { not_built("copy_to_gpu"); }
Tensor copy_to_host(const Tensor&) { not_built("copy_to_host"); }

void sgd_update(const Tensor&, const Tensor&, Tensor&, double) { not_built("SGD"); }
void sgd_momentum_update(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, double,
                         double, bool) {
  not_built("SGD");
}
void adam_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                 Tensor&, const AdamStepParams&) {
  not_built("Adam");
}

}  // namespace dtensor::kernels::gpu
