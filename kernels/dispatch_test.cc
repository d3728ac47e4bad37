// The kernel front: dispatch on the inputs' device type, the error for mixed device types, and
// the front's error for a device type with no table entry (every GPU kernel in a build without
// CUDA).
#include <catch2/catch.hpp>

#include "kernels/kernels.h"
#include "kernels/optimizer_update.h"
#include "runtime/element_loops.h"

using namespace dtensor;
using namespace dtensor::kernels;
using Catch::Message;

namespace {
// A GPU-tagged handle on host storage: this build cannot allocate GPU memory, and the front only
// looks at the tag before it finds no GPU entry and throws.
Tensor on_gpu(const Tensor& t, int64_t id = 0) { return t.with_device({DeviceType::kGPU, id}); }

// A stand-in GPU fill for the table: counts its calls.
int stand_in_fills = 0;
void stand_in_fill(Tensor&, double) { ++stand_in_fills; }
}  // namespace

TEST_CASE("the front runs CPU tensors on the CPU kernels, on any CPU device") {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32, {DeviceType::kCPU, 0});
  Tensor b = Tensor::zeros({3}, DType::kF32, {DeviceType::kCPU, 5});
  Tensor sum = binary(BinaryOp::kAdd, a, b);
  CHECK(sum.shape() == Shape{2, 3});
  CHECK(sum.device() == Device{DeviceType::kCPU, 0});
  CHECK(concat({a, a}, 0).shape() == Shape{4, 3});
}

TEST_CASE("inputs on different device types are an error naming the op and devices") {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  Tensor b = on_gpu(Tensor::zeros({3}, DType::kF32));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kAdd, a, b), InvalidArgumentError,
                       Message("[add] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[3]); a "
                               "kernel runs on one device type"));
  CHECK_THROWS_MATCHES(matmul(a, on_gpu(Tensor::zeros({3, 4}, DType::kF32), 2)),
                       InvalidArgumentError,
                       Message("[matmul] inputs are on CPU:0 and GPU:2 (f32[2,3] and f32[3,4]); "
                               "a kernel runs on one device type"));
  Tensor bias = on_gpu(Tensor::zeros({4}, DType::kF32));
  CHECK_THROWS_MATCHES(dense(a, Tensor::zeros({3, 4}, DType::kF32), &bias, std::nullopt),
                       InvalidArgumentError,
                       Message("[dense] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[4]); a "
                               "kernel runs on one device type"));
  CHECK_THROWS_MATCHES(concat({a, on_gpu(a)}, 0), InvalidArgumentError,
                       Message("[concat] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[2,3]); "
                               "a kernel runs on one device type"));
  CHECK_THROWS_MATCHES(layer_norm(a, Tensor::zeros({3}, DType::kF32), on_gpu(b), 1e-5),
                       InvalidArgumentError,
                       Message("[layer_norm] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[3]); "
                               "a kernel runs on one device type"));
}

TEST_CASE("GPU tensors in a build without CUDA get the front's error, naming the op") {
  Tensor x = on_gpu(Tensor::zeros({2, 3}, DType::kF32));
  const char* tail = " has no GPU kernel in this build";
  CHECK_THROWS_MATCHES(matmul(x, on_gpu(Tensor::zeros({3, 4}, DType::kF32))), UnimplementedError,
                       Message(std::string("[matmul]") + tail));
  CHECK_THROWS_MATCHES(unary(UnaryOp::kRelu, x), UnimplementedError,
                       Message(std::string("[relu]") + tail));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kMul, x, x), UnimplementedError,
                       Message(std::string("[mul]") + tail));
  CHECK_THROWS_MATCHES(reduce(ReduceKind::kMean, x, {0}, false), UnimplementedError,
                       Message(std::string("[reduce_mean]") + tail));
  CHECK_THROWS_MATCHES(softmax(x, -1), UnimplementedError,
                       Message(std::string("[softmax]") + tail));
  CHECK_THROWS_MATCHES(concat({x, x}, 0), UnimplementedError,
                       Message(std::string("[concat]") + tail));
  CHECK_THROWS_MATCHES(transpose(x, {1, 0}), UnimplementedError,
                       Message(std::string("[transpose]") + tail));
  CHECK_THROWS_MATCHES(conv2d(on_gpu(Tensor::zeros({1, 1, 2, 3}, DType::kF32)),
                              on_gpu(Tensor::zeros({1, 1, 3, 2}, DType::kF32)), {}),
                       UnimplementedError, Message("[conv2d] has no GPU kernel in this build"));
  // Shape arithmetic is host-only and needs no GPU kernel.
  CHECK(broadcast_shapes({2, 1}, {3}, "add") == Shape{2, 3});
}

TEST_CASE(
    "the front checks arguments once, before any backend: a GPU tensor in a build without "
    "CUDA gets the argument error, not the missing kernel") {
  Tensor logits = on_gpu(Tensor::zeros({2, 3}, DType::kF32));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(logits, on_gpu(Tensor::zeros({2}, DType::kF32))), DTypeError,
      Message("[sparse_softmax_cross_entropy] labels must be i32 or i64, got "
              "f32[2]"));
  Tensor labels = on_gpu(Tensor::zeros({2}, DType::kI32));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy_grad(logits, labels, on_gpu(Tensor::zeros({3}, DType::kF32))),
      ShapeError,
      Message("[sparse_softmax_cross_entropy_grad] grad f32[3] does not match labels i32[2]"));
  CHECK_THROWS_MATCHES(one_hot(labels, -1, DType::kF32), InvalidArgumentError,
                       Message("[one_hot] depth must be >= 0, got -1"));
  CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(logits, labels), UnimplementedError,
                       Message("[sparse_softmax_cross_entropy] has no GPU kernel in this build"));
  // The shape ops' checks (kernels/checks.h), which the CPU and CUDA halves no longer repeat.
  Tensor x = on_gpu(Tensor::zeros({2, 3}, DType::kF32));
  CHECK_THROWS_MATCHES(
      transpose(x, {0, 0}), InvalidArgumentError,
      Message("[transpose] perm [0,0] is not a permutation of the axes of f32[2,3]"));
  CHECK_THROWS_MATCHES(concat({x, on_gpu(Tensor::zeros({2, 3}, DType::kF64))}, 1), DTypeError,
                       Message("[concat] dtypes differ: f32[2,3] vs f64[2,3]"));
  CHECK_THROWS_MATCHES(slice(x, {1, 0}, {2, -1}), InvalidArgumentError,
                       Message("[slice] box at [1,0] of size [2,-1] does not fit f32[2,3]"));
  CHECK_THROWS_MATCHES(pad(x, {{0, 0}, {1, -1}}), InvalidArgumentError,
                       Message("[pad] paddings [(0,0),(1,-1)] must be non-negative for f32[2,3]"));
  CHECK_THROWS_MATCHES(gather(x, on_gpu(Tensor::zeros({2}, DType::kF32)), 0), DTypeError,
                       Message("[gather] indices must be i32 or i64, got f32[2]"));
  CHECK_THROWS_MATCHES(
      scatter_add({2, 3}, labels, on_gpu(Tensor::zeros({3, 3}, DType::kF32)), 0), ShapeError,
      Message("[scatter_add] updates f32[3,3] should have shape [2,3] for indices i32[2] into "
              "[2,3] along axis 0"));
  CHECK_THROWS_MATCHES(slice(x, {0, 1}, {2, -1}), UnimplementedError,
                       Message("[slice] has no GPU kernel in this build"));
}

TEST_CASE("the runtime's element loops dispatch the same way") {
  Tensor cpu = Tensor::zeros({2, 3}, DType::kF32);
  Tensor gpu = on_gpu(Tensor::zeros({2, 3}, DType::kF32));
  const char* tail = " has no GPU kernel in this build";
  CHECK_THROWS_MATCHES(copy_box_elements(cpu, {0, 0}, gpu, {0, 0}, {2, 3}), InvalidArgumentError,
                       Message("[copy_box] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[2,3]); "
                               "a kernel runs on one device type"));
  CHECK_THROWS_MATCHES(copy_box_elements(gpu, {0, 0}, gpu, {0, 0}, {2, 3}), UnimplementedError,
                       Message(std::string("[copy_box]") + tail));
  CHECK_THROWS_MATCHES(reduce_range_elements(gpu, gpu, ReduceOp::kSum, 0, 6), UnimplementedError,
                       Message(std::string("[reduce_into]") + tail));
  CHECK_THROWS_MATCHES(reduce_tensors_into(cpu, {cpu, gpu}, ReduceOp::kMax), InvalidArgumentError,
                       Message("[reduce_tensors] inputs are on CPU:0 and GPU:0 (f32[2,3] and "
                               "f32[2,3]); a kernel runs on one device type"));
  CHECK_THROWS_MATCHES(fill_value(gpu, 1.0), UnimplementedError,
                       Message(std::string("[fill]") + tail));
  CHECK_THROWS_MATCHES(fill_random(gpu, {2, 3}, {0, 0}, RandomSpec{}), UnimplementedError,
                       Message(std::string("[random_uniform]") + tail));
  CHECK_THROWS_MATCHES(adam_update(gpu, gpu, gpu, gpu, gpu, gpu, gpu, {0.9, 0.999, 0.1, 1e-7, 1}),
                       UnimplementedError, Message(std::string("[Adam]") + tail));
  CHECK_THROWS_MATCHES(sgd_update(cpu, gpu, cpu, 0.1), InvalidArgumentError,
                       Message("[SGD] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[2,3]); a "
                               "kernel runs on one device type"));
  // And the CPU halves run.
  Tensor ones = Tensor::empty({2, 3}, DType::kF32);
  fill_value(ones, 1.0);
  Tensor out = Tensor::empty({2, 3}, DType::kF32);
  sgd_update(ones, ones, out, 0.5);
  CHECK(out.data<float>()[5] == 0.5f);
  reduce_range_elements(out, ones, ReduceOp::kSum, 0, 6);
  CHECK(out.data<float>()[0] == 1.5f);
}

TEST_CASE("the runtime's element-loop fronts call the entries filled in the GPU table") {
  // The runtime floor cannot name the table; the table hands the runtime its element-loop part.
  REQUIRE(gpu::element_loop_table == &gpu::registered_table);
  Tensor x = on_gpu(Tensor::zeros({2, 3}, DType::kF32));
  auto* const backend_fill = gpu::registered_table.fill_value;  // null without CUDA
  gpu::registered_table.fill_value = stand_in_fill;
  fill_value(x, 2.0);
  gpu::registered_table.fill_value = backend_fill;
  CHECK(stand_in_fills == 1);
}
