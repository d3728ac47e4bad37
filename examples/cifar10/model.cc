#include "examples/cifar10/model.h"

#include "dtensor/creation.h"
#include "ops/ops.h"

namespace dtensor::examples {
namespace {

// SAME padding for a spatial dim of `in` at `stride`: the output size the pools produce.
int64_t same_size(int64_t in, int64_t stride) { return (in + stride - 1) / stride; }

}  // namespace

Cifar10Cnn::Cifar10Cnn(const Mesh& mesh, const Shape& image_shape, int64_t classes, uint64_t seed)
    : image_shape_(image_shape) {
  const int64_t h = image_shape[0], w = image_shape[1], c = image_shape[2];
  // Two 3x3/2 SAME pools; the convolutions keep the size.
  const int64_t flat = same_size(same_size(h, 2), 2) * same_size(same_size(w, 2), 2) * 64;
  auto layer = [&](const std::string& name, const Shape& shape, double stddev, double bias,
                   uint64_t offset) {
    variables_.emplace_back(
        truncated_normal(shape, Layout::replicated(mesh, static_cast<int64_t>(shape.size())),
                         seed + offset, 0.0, stddev),
        name + "/weights");
    const int64_t units = shape.back();
    variables_.emplace_back(fill({units}, Layout::replicated(mesh, 1), bias), name + "/biases");
  };
  layer("conv1", {5, 5, c, 64}, 5e-2, 0.0, 0);
  layer("conv2", {5, 5, 64, 64}, 5e-2, 0.1, 1);
  layer("local3", {flat, 384}, 0.04, 0.1, 2);
  layer("local4", {384, 192}, 0.04, 0.1, 3);
  layer("softmax_linear", {192, classes}, 1.0 / 192.0, 0.0, 4);
}

std::vector<DVariable> Cifar10Cnn::decayed_variables() const {
  return {variables_[4], variables_[6]};
}

DTensor Cifar10Cnn::operator()(const DTensor& images) const {
  const auto& v = variables_;
  DTensor x = images;
  if (x.shape().size() == 2) {
    x = reshape(x, {x.shape()[0], image_shape_[0], image_shape_[1], image_shape_[2]});
  }
  Conv2dOptions conv;  // 5x5, stride 1
  conv.padding.kind = Padding2d::kSame;
  Pool2dOptions pool;
  pool.window = {3, 3};
  pool.strides = {2, 2};
  pool.padding.kind = Padding2d::kSame;
  auto norm = [](const DTensor& t) {
    return local_response_normalization(t, /*depth_radius=*/4, /*bias=*/1.0, /*alpha=*/0.001 / 9.0,
                                        /*beta=*/0.75);
  };
  // Each layer's bias and ReLU fused into its convolution or product (one kernel per shard).
  const DenseActivation relu = DenseActivation::kRelu;
  DTensor h = conv2d(x, v[0].value(), v[1].value(), relu, conv);
  h = norm(max_pool2d(h, pool));
  h = conv2d(h, v[2].value(), v[3].value(), relu, conv);
  h = max_pool2d(norm(h), pool);
  h = flatten(h);
  h = dense(h, v[4].value(), v[5].value(), relu);
  h = dense(h, v[6].value(), v[7].value(), relu);
  return dense(h, v[8].value(), v[9].value());
}

}  // namespace dtensor::examples
