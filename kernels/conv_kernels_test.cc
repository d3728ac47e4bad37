// The CNN kernels (convolution, pooling, local response normalisation) at the kernel front: the
// f32 oneDNN path against the f64 direct loops (ops/conv_test.cc checks both against naive
// references through the ops), tie and padding rules, empty shards, concurrent calls sharing the
// primitive cache, and the exact kernel errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "kernels/kernels.h"

using namespace dtensor;
using namespace dtensor::kernels;

namespace {

using Rng = std::mt19937_64;

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Tensor random_tensor(const Shape& shape, Rng& rng, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  std::uniform_real_distribution<double> d(-1, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = d(rng);
  return cast(t, dtype);
}

Tensor from(const Shape& shape, std::vector<double> v) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

void check_close(const Tensor& got, const Tensor& want, double tolerance) {
  REQUIRE(got.shape() == want.shape());
  const Tensor g = cast(got, DType::kF64), w = cast(want, DType::kF64);
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    INFO("element " << i);
    REQUIRE(g.data<double>()[i] == Approx(w.data<double>()[i]).margin(tolerance));
  }
}

struct Geometry {
  Shape x, w;
  Conv2dParams p;
};

Geometry random_geometry(Rng& rng) {
  while (true) {
    Geometry g;
    g.p.groups = uniform_int(rng, 1, 3);
    const int64_t cpg = uniform_int(rng, 1, 5), opg = uniform_int(rng, 1, 5);
    g.x = {uniform_int(rng, 1, 4), uniform_int(rng, 1, 9), uniform_int(rng, 1, 9),
           cpg * g.p.groups};
    g.w = {uniform_int(rng, 1, 4), uniform_int(rng, 1, 4), cpg, opg * g.p.groups};
    g.p.stride_h = uniform_int(rng, 1, 3), g.p.stride_w = uniform_int(rng, 1, 3);
    g.p.dilation_h = uniform_int(rng, 1, 3), g.p.dilation_w = uniform_int(rng, 1, 3);
    g.p.pad_top = uniform_int(rng, 0, 3), g.p.pad_bottom = uniform_int(rng, 0, 3);
    g.p.pad_left = uniform_int(rng, 0, 3), g.p.pad_right = uniform_int(rng, 0, 3);
    if (conv_output_size(g.x[1], g.p.pad_top, g.p.pad_bottom, g.w[0], g.p.dilation_h,
                         g.p.stride_h) >= 1 &&
        conv_output_size(g.x[2], g.p.pad_left, g.p.pad_right, g.w[1], g.p.dilation_w,
                         g.p.stride_w) >= 1) {
      return g;
    }
  }
}

Shape output_shape(const Geometry& g) {
  return {
      g.x[0],
      conv_output_size(g.x[1], g.p.pad_top, g.p.pad_bottom, g.w[0], g.p.dilation_h, g.p.stride_h),
      conv_output_size(g.x[2], g.p.pad_left, g.p.pad_right, g.w[1], g.p.dilation_w, g.p.stride_w),
      g.w[3]};
}

}  // namespace

TEST_CASE("f32 and bf16 convolutions match the f64 direct loops") {
  Rng rng(1);
  for (int i = 0; i < 150; ++i) {
    const Geometry g = random_geometry(rng);
    const Tensor x = random_tensor(g.x, rng, DType::kF64), w = random_tensor(g.w, rng, DType::kF64);
    const Tensor dy = random_tensor(output_shape(g), rng, DType::kF64);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      INFO("case " << i << " " << dtype_name(dtype));
      const double tol = dtype == DType::kF32 ? 1e-4 : 0.1;
      const Tensor xd = cast(x, dtype), wd = cast(w, dtype), dyd = cast(dy, dtype);
      const Tensor x64 = cast(xd, DType::kF64), w64 = cast(wd, DType::kF64),
                   dy64 = cast(dyd, DType::kF64);
      const Tensor y = conv2d(xd, wd, g.p);
      CHECK(y.dtype() == dtype);
      check_close(y, conv2d(x64, w64, g.p), tol);
      check_close(conv2d_backprop_input(g.x, wd, dyd, g.p),
                  conv2d_backprop_input(g.x, w64, dy64, g.p), tol);
      check_close(conv2d_backprop_filter(xd, g.w, dyd, g.p),
                  conv2d_backprop_filter(x64, g.w, dy64, g.p), tol);
    }
  }
}

TEST_CASE("convolutions of empty shards give empty or zero results") {
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    // No images: an empty output and a zero filter gradient.
    const Tensor x0 = Tensor::zeros({0, 4, 4, 3}, dtype), w = Tensor::zeros({3, 3, 3, 2}, dtype);
    CHECK(conv2d(x0, w, p).shape() == Shape{0, 4, 4, 2});
    const Tensor dw =
        conv2d_backprop_filter(x0, {3, 3, 3, 2}, Tensor::zeros({0, 4, 4, 2}, dtype), p);
    CHECK(dw.shape() == Shape{3, 3, 3, 2});
    for (int64_t i = 0; i < dw.num_elements(); ++i)
      CHECK(cast(dw, DType::kF64).data<double>()[i] == 0);
    // No input channels (an uneven shard of a contracted C): zeros.
    const Tensor y =
        conv2d(Tensor::zeros({2, 4, 4, 0}, dtype), Tensor::zeros({3, 3, 0, 2}, dtype), p);
    CHECK(y.shape() == Shape{2, 4, 4, 2});
    for (int64_t i = 0; i < y.num_elements(); ++i)
      CHECK(cast(y, DType::kF64).data<double>()[i] == 0);
    // No output channels.
    CHECK(
        conv2d(Tensor::zeros({2, 4, 4, 3}, dtype), Tensor::zeros({3, 3, 3, 0}, dtype), p).shape() ==
        Shape{2, 4, 4, 0});
  }
}

TEST_CASE("convolutions run concurrently from several threads with their own thread budgets") {
  Rng rng(2);
  std::vector<Geometry> geometries;
  std::vector<Tensor> xs, ws, want;
  for (int i = 0; i < 6; ++i) {
    geometries.push_back(random_geometry(rng));
    xs.push_back(random_tensor(geometries.back().x, rng, DType::kF32));
    ws.push_back(random_tensor(geometries.back().w, rng, DType::kF32));
    want.push_back(
        conv2d(cast(xs.back(), DType::kF64), cast(ws.back(), DType::kF64), geometries.back().p));
  }
  std::vector<Tensor> got(12);
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      Conv2dParams p = geometries[t % 6].p;
      p.threads = 1 + t % 2;
      for (int rep = 0; rep < 5; ++rep) got[t] = conv2d(xs[t % 6], ws[t % 6], p);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 12; ++t) check_close(got[t], want[t % 6], 1e-4);
}

TEST_CASE("max pooling takes the first maximum and propagates NaN; avg excludes padding") {
  Pool2dParams p;
  p.window_h = p.window_w = 2;
  p.stride_h = p.stride_w = 2;
  p.pad_bottom = p.pad_right = 1;  // the last window of each dim reads one padded position
  const Tensor x = from({1, 3, 3, 1}, {1, 5, 2,  //
                                       5, 0, 3,  //
                                       4, 6, 7});
  check_close(max_pool2d(x, p), from({1, 2, 2, 1}, {5, 3, 6, 7}), 0);
  // Ties: the gradient goes to the first 5 (row 0), nothing to the second.
  check_close(max_pool2d_grad(x, from({1, 2, 2, 1}, {10, 20, 30, 40}), p),
              from({1, 3, 3, 1}, {0, 10, 0, 0, 0, 20, 0, 30, 40}), 0);
  check_close(avg_pool2d(x, p), from({1, 2, 2, 1}, {11.0 / 4, 2.5, 5, 7}), 1e-12);
  check_close(avg_pool2d_grad({1, 3, 3, 1}, from({1, 2, 2, 1}, {4, 2, 2, 1}), p),
              from({1, 3, 3, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}), 1e-12);
  const Tensor with_nan = from({1, 2, 2, 1}, {1, NAN, 3, 2});
  Pool2dParams whole;
  whole.window_h = whole.window_w = 2;
  CHECK(std::isnan(max_pool2d(with_nan, whole).data<double>()[0]));
}

TEST_CASE("local_response_normalization_grad matches finite differences") {
  Rng rng(3);
  const Tensor x = random_tensor({2, 1, 2, 7}, rng, DType::kF64);
  const Tensor dy = random_tensor(x.shape(), rng, DType::kF64);
  for (const LrnParams& p : {LrnParams{2, 1.0, 0.5, 0.75}, LrnParams{1, 2.0, 0.3, 0.6},
                             LrnParams{5, 1.0, 1.0, 0.5}, LrnParams{0, 1.5, 0.2, 1.0}}) {
    const Tensor dx = local_response_normalization_grad(x, dy, p);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      auto loss = [&](double delta) {
        Tensor t = x.clone();
        t.data<double>()[i] += delta;
        const Tensor y = local_response_normalization(t, p);
        double s = 0;
        for (int64_t j = 0; j < y.num_elements(); ++j)
          s += y.data<double>()[j] * dy.data<double>()[j];
        return s;
      };
      CHECK(dx.data<double>()[i] ==
            Approx((loss(1e-6) - loss(-1e-6)) / 2e-6).epsilon(1e-6).margin(1e-8));
    }
  }
}

TEST_CASE("CNN kernel errors") {
  const Tensor x = Tensor::zeros({1, 4, 4, 2}, DType::kF32);
  CHECK_THROWS_MATCHES(
      conv2d(x, Tensor::zeros({3, 3, 3, 2}, DType::kF32), {}), ShapeError,
      Catch::Message(
          "[conv2d] x [1,4,4,2] has 2 channels, w [3,3,3,2] takes 3 in each of 1 groups"));
  CHECK_THROWS_MATCHES(
      conv2d(x, Tensor::zeros({5, 3, 2, 2}, DType::kF32), {}), ShapeError,
      Catch::Message(
          "[conv2d] the 5x3 window (dilation 1x1) does not fit x [1,4,4,2] padded by 0,0,0,0"));
  CHECK_THROWS_MATCHES(conv2d(x, Tensor::zeros({3, 3, 2, 2}, DType::kF64), {}), DTypeError,
                       Catch::Message("[conv2d] dtypes differ: f32[1,4,4,2] and f64[3,3,2,2]"));
  Conv2dParams zero_stride;
  zero_stride.stride_h = 0;
  CHECK_THROWS_MATCHES(conv2d(x, Tensor::zeros({3, 3, 2, 2}, DType::kF32), zero_stride),
                       InvalidArgumentError,
                       Catch::Message("[conv2d] strides 0x1, dilations 1x1 and groups 1 must be >= "
                                      "1 and paddings 0,0,0,0 >= 0"));
  CHECK_THROWS_MATCHES(conv2d_backprop_input({1, 4, 4, 2}, Tensor::zeros({3, 3, 2, 2}, DType::kF32),
                                             Tensor::zeros({1, 3, 2, 2}, DType::kF32), {}),
                       ShapeError,
                       Catch::Message("[conv2d_backprop_input] dy f32[1,3,2,2] must be [1,2,2,2]"));
  Pool2dParams pool;
  pool.window_h = 5;
  CHECK_THROWS_MATCHES(
      max_pool2d(x, pool), ShapeError,
      Catch::Message("[max_pool2d] the 5x1 window does not fit x [1,4,4,2] padded by 0,0,0,0"));
  CHECK_THROWS_MATCHES(avg_pool2d(Tensor::zeros({4, 4, 2}, DType::kF32), {}), ShapeError,
                       Catch::Message("[avg_pool2d] x [4,4,2] must be [n,h,w,c]"));
  CHECK_THROWS_MATCHES(
      local_response_normalization(Tensor::zeros({2}, DType::kI32), {}), DTypeError,
      Catch::Message("[local_response_normalization] unsupported dtype i32: i32[2]"));
}
