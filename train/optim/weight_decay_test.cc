// L2 weight decay: the loss against a direct formula, and its gradient (with a data term) under
// every layout of the variables on {8} and {2,4} meshes, uneven shards included, against one
// device and against the formula grad = c + wd * w.
#include "train/optim/weight_decay.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;

namespace {

Tensor values(const Shape& shape, DType dtype, double base, double step) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double x = base + step * static_cast<double>((i * 7) % 11) - 0.3 * static_cast<double>(i);
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(x);
    } else {
      t.data<double>()[i] = x;
    }
  }
  return t;
}

double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? t.data<float>()[i] : t.data<double>()[i];
}

struct Grads {
  Tensor loss, g0, g1;
};

// loss = sum(c * w0) + sum(w1) + wd * (l2(w0) + l2(w1)) and its gradients, global.
Grads run(const Layout& l0, const Layout& l1, DType dtype, double wd) {
  DVariable w0(distribute(values({6, 5}, dtype, 0.5, 0.25), l0), "w0");
  DVariable w1(distribute(values({3, 7}, dtype, -1.0, 0.5), l1), "w1");
  DTensor c = distribute(values({6, 5}, dtype, 2.0, -0.125), l0);
  GradientTape tape;
  tape.watch(w0);
  tape.watch(w1);
  DTensor loss = add(add(reduce_sum(mul(c, w0.value())), reduce_sum(w1.value())),
                     weight_decay_loss({w0, w1}, wd));
  std::vector<DTensor> g = tape.gradient(loss, std::vector<DVariable>{w0, w1});
  CHECK(g[0].layout() == w0.layout());
  CHECK(g[1].layout() == w1.layout());
  return {to_global(loss), to_global(g[0]), to_global(g[1])};
}

}  // namespace

TEST_CASE("l2_loss is sum(x^2) / 2") {
  Mesh mesh = Mesh::create({{"x", 1}}, DeviceType::kCPU);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor x = values({4, 3}, dtype, 1.5, -0.5);
    double want = 0;
    for (int64_t i = 0; i < x.num_elements(); ++i) want += at(x, i) * at(x, i) / 2;
    Tensor got = to_global(l2_loss(distribute(x, Layout::replicated(mesh, 2))));
    CHECK(got.shape().empty());
    CHECK(at(got, 0) == Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("weight decay's gradient is wd * w under every layout, as on one device") {
  const double wd = 0.004;
  const DType dtype = DType::kF64;
  Mesh one = Mesh::create({{"x", 1}}, DeviceType::kCPU);
  Grads ref = run(Layout::replicated(one, 2), Layout::replicated(one, 2), dtype, wd);
  // The formula: d/dw0 = c + wd * w0, d/dw1 = 1 + wd * w1.
  Tensor w0 = values({6, 5}, dtype, 0.5, 0.25), w1 = values({3, 7}, dtype, -1.0, 0.5);
  Tensor c = values({6, 5}, dtype, 2.0, -0.125);
  double loss = 0;
  for (int64_t i = 0; i < 30; ++i) {
    CHECK(at(ref.g0, i) == Approx(at(c, i) + wd * at(w0, i)).epsilon(1e-12));
    loss += at(c, i) * at(w0, i) + wd * at(w0, i) * at(w0, i) / 2;
  }
  for (int64_t i = 0; i < 21; ++i) {
    CHECK(at(ref.g1, i) == Approx(1 + wd * at(w1, i)).epsilon(1e-12));
    loss += at(w1, i) + wd * at(w1, i) * at(w1, i) / 2;
  }
  CHECK(at(ref.loss, 0) == Approx(loss).epsilon(1e-12));

  for (const Mesh& mesh : {Mesh::create({{"x", 8}}, DeviceType::kCPU),
                           Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU)}) {
    std::vector<Layout> layouts = all_layouts(mesh, 2, /*with_partial=*/false);
    for (size_t i = 0; i < layouts.size(); ++i) {
      const Layout& l0 = layouts[i];
      const Layout& l1 = layouts[(i + 1) % layouts.size()];
      INFO(l0.to_string() << " / " << l1.to_string());
      Grads got = run(l0, l1, dtype, wd);
      CHECK(at(got.loss, 0) == Approx(at(ref.loss, 0)).epsilon(1e-12));
      for (int64_t e = 0; e < 30; ++e) CHECK(at(got.g0, e) == Approx(at(ref.g0, e)).epsilon(1e-12));
      for (int64_t e = 0; e < 21; ++e) CHECK(at(got.g1, e) == Approx(at(ref.g1, e)).epsilon(1e-12));
    }
  }
}

TEST_CASE("weight_decay_loss with wd = 0 adds nothing to the gradient") {
  Mesh mesh = Mesh::create({{"x", 2}}, DeviceType::kCPU);
  Grads got = run(Layout({"x", "unsharded"}, mesh), Layout::replicated(mesh, 2), DType::kF32, 0);
  Tensor c = values({6, 5}, DType::kF32, 2.0, -0.125);
  for (int64_t i = 0; i < 30; ++i) CHECK(at(got.g0, i) == at(c, i));
  for (int64_t i = 0; i < 21; ++i) CHECK(at(got.g1, i) == 1);
}

TEST_CASE("weight decay errors") {
  Mesh a = Mesh::create({{"x", 2}}, DeviceType::kCPU);
  Mesh b = Mesh::create({{"y", 4}}, DeviceType::kCPU);
  DVariable w(distribute(values({2, 3}, DType::kF32, 0, 1), Layout::replicated(a, 2)), "w");
  DVariable v(distribute(values({2, 3}, DType::kF32, 0, 1), Layout::replicated(b, 2)), "v");
  DVariable d(distribute(values({2, 3}, DType::kF64, 0, 1), Layout::replicated(a, 2)), "d");
  CHECK_THROWS_MATCHES(weight_decay_loss({}, 0.1), InvalidArgumentError,
                       Message("[weight_decay_loss] no variables to decay"));
  CHECK_THROWS_MATCHES(weight_decay_loss({w}, -1), InvalidArgumentError,
                       Message("[weight_decay_loss] wd must be finite and >= 0, got -1"));
  CHECK_THROWS_MATCHES(
      weight_decay_loss({w, v}, 0.1), InvalidArgumentError,
      Message("[weight_decay_loss] variables 'w' f32 on mesh x=2 and 'v' f32 on mesh y=4 differ in "
              "mesh or dtype"));
  CHECK_THROWS_MATCHES(
      weight_decay_loss({w, d}, 0.1), InvalidArgumentError,
      Message("[weight_decay_loss] variables 'w' f32 on mesh x=2 and 'd' f64 on mesh x=2 differ in "
              "mesh or dtype"));
  Tensor labels = Tensor::empty({2}, DType::kI32);
  labels.data<int32_t>()[0] = 1;
  labels.data<int32_t>()[1] = 2;
  CHECK_THROWS_MATCHES(l2_loss(distribute(labels, Layout::replicated(a, 1))), DTypeError,
                       Message("[l2_loss] i32 is not a floating dtype: i32[2] [unsharded]"));
}
