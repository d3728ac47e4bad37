// The CNN launchers of cnn.cu, compiled as host C++ (host_shim/: a launch is a synchronous call
// on one thread), against the CPU kernels on the same inputs. This runs the very kernel bodies
// the GPU runs on every machine, CUDA or not: the direct convolutions (f64 and the fallback) to
// 1e-12 (f64) and 1e-5 (f32, against oneDNN), pooling and LRN bit for bit (the same operations in
// the same order, no FMA contraction on the host). What it cannot show: anything about the GPU
// itself (memory, launch configuration, concurrency), cuDNN, or nvcc's FMA contraction, which
// the GPU tests (cuda_kernels_test.cc) cover to a tolerance.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cnn_launch.h"
#include "kernels/kernels.h"

using namespace dtensor;
using namespace dtensor::kernels;

namespace {

Tensor uniform(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed,
               bool integers = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> draw(lo, hi);
  Tensor t = Tensor::empty(shape, DType::kF64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = integers ? std::floor(draw(rng)) : draw(rng);
  return cast(t, dtype);
}

int code(DType dtype) { return static_cast<int>(dtype); }

// got matches want within tol relative (absolute below 1); tol 0: the same bits, NaNs included.
void check_same(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  if (tol == 0) {
    CHECK(bitwise_equal(got, want));
    return;
  }
  const Tensor a = cast(got, DType::kF64), b = cast(want, DType::kF64);
  int bad = 0;
  for (int64_t i = 0; i < a.num_elements() && bad < 5; ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    if (!(std::abs(x - y) <= tol * std::max(1.0, std::abs(y)))) {
      ++bad;
      FAIL_CHECK("element " << i << ": " << x << " vs CPU " << y);
    }
  }
}

struct ConvCase {
  Shape x, w;
  int64_t sh, sw, dh, dw, pt, pb, pl, pr, groups;
};

Conv2dParams params_of(const ConvCase& c) {
  Conv2dParams p;
  p.stride_h = c.sh;
  p.stride_w = c.sw;
  p.dilation_h = c.dh;
  p.dilation_w = c.dw;
  p.pad_top = c.pt;
  p.pad_bottom = c.pb;
  p.pad_left = c.pl;
  p.pad_right = c.pr;
  p.groups = c.groups;
  return p;
}

cuda_launch::ConvDims dims_of(const ConvCase& c) {
  return {c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], c.w[1], c.w[2], c.w[3],
          conv_output_size(c.x[1], c.pt, c.pb, c.w[0], c.dh, c.sh),
          conv_output_size(c.x[2], c.pl, c.pr, c.w[1], c.dw, c.sw), c.groups, c.sh, c.sw, c.dh,
          c.dw, c.pt, c.pl};
}

}  // namespace

TEST_CASE("direct convolution launchers match the CPU conv2d and its gradients") {
  const std::vector<ConvCase> cases = {
      {{2, 7, 9, 3}, {3, 3, 3, 4}, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {{2, 8, 8, 4}, {3, 3, 4, 6}, 2, 2, 1, 1, 0, 1, 0, 1, 1},
      {{1, 9, 7, 6}, {2, 3, 3, 4}, 1, 1, 2, 1, 0, 0, 0, 0, 2},
      {{2, 6, 6, 4}, {3, 3, 1, 4}, 1, 1, 1, 1, 1, 1, 1, 1, 4},
      {{1, 10, 11, 3}, {4, 2, 3, 5}, 3, 2, 1, 2, 3, 0, 1, 2, 1},
      {{2, 13, 4, 2}, {3, 2, 2, 3}, 2, 1, 2, 1, 2, 1, 0, 1, 1},
  };
  for (DType dt : {DType::kF32, DType::kF64}) {
    uint64_t seed = 1;
    for (const ConvCase& c : cases) {
      const Conv2dParams p = params_of(c);
      const cuda_launch::ConvDims d = dims_of(c);
      const std::string what = std::string(dtype_name(dt)) + " x [" + std::to_string(c.x[1]) +
                               "," + std::to_string(c.x[2]) + "] groups " +
                               std::to_string(c.groups);
      const double tol = dt == DType::kF64 ? 1e-12 : 1e-5;
      Tensor x = uniform(c.x, dt, -2, 2, ++seed), w = uniform(c.w, dt, -1, 1, ++seed);
      const Tensor y = conv2d(x, w, p);
      REQUIRE(y.shape() == Shape{d.n, d.oh, d.ow, d.o});
      Tensor got = Tensor::empty(y.shape(), dt);
      cuda_launch::conv2d_direct(code(dt), x.raw_data(), w.raw_data(), got.raw_data(), d, nullptr);
      check_same(got, y, tol, "conv2d " + what);
      Tensor dy = uniform(y.shape(), dt, -1, 1, ++seed);
      Tensor dx = Tensor::empty(c.x, dt), dw = Tensor::empty(c.w, dt);
      cuda_launch::conv2d_backprop_input_direct(code(dt), w.raw_data(), dy.raw_data(),
                                                dx.raw_data(), d, nullptr);
      check_same(dx, conv2d_backprop_input(c.x, w, dy, p), tol, "backprop_input " + what);
      cuda_launch::conv2d_backprop_filter_direct(code(dt), x.raw_data(), dy.raw_data(),
                                                 dw.raw_data(), d, nullptr);
      check_same(dw, conv2d_backprop_filter(x, c.w, dy, p), tol, "backprop_filter " + what);
    }
  }
}

TEST_CASE("pooling launchers give the CPU's bits: first maximum on ties, NaN, padded windows") {
  struct PoolCase {
    Shape x;
    int64_t wh, ww, sh, sw, pt, pb, pl, pr;
  };
  const std::vector<PoolCase> cases = {
      {{2, 8, 8, 3}, 2, 2, 2, 2, 0, 0, 0, 0},
      {{2, 7, 9, 4}, 3, 3, 2, 2, 1, 1, 1, 1},
      {{1, 6, 5, 5}, 3, 2, 1, 2, 0, 2, 1, 0},
      {{3, 5, 7, 2}, 3, 3, 1, 1, 1, 1, 1, 1},
  };
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const PoolCase& c : cases) {
      Pool2dParams p;
      p.window_h = c.wh;
      p.window_w = c.ww;
      p.stride_h = c.sh;
      p.stride_w = c.sw;
      p.pad_top = c.pt;
      p.pad_bottom = c.pb;
      p.pad_left = c.pl;
      p.pad_right = c.pr;
      const int64_t oh = conv_output_size(c.x[1], c.pt, c.pb, c.wh, 1, c.sh);
      const int64_t ow = conv_output_size(c.x[2], c.pl, c.pr, c.ww, 1, c.sw);
      const cuda_launch::PoolDims d{c.x[0], c.x[1], c.x[2], c.x[3], oh,   ow,
                                    c.wh,   c.ww,   c.sh,   c.sw,   c.pt, c.pl};
      INFO(dtype_name(dt) << " window " << c.wh << "x" << c.ww << " x [" << c.x[1] << ","
                          << c.x[2] << "]");
      // Integers in [-3, 3): ties in most windows. One NaN.
      Tensor x = uniform(c.x, DType::kF64, -3, 3, 5, /*integers=*/true);
      x.data<double>()[5] = std::numeric_limits<double>::quiet_NaN();
      x = cast(x, dt);
      const Tensor y = max_pool2d(x, p);
      Tensor got = Tensor::empty(y.shape(), dt);
      cuda_launch::max_pool(code(dt), x.raw_data(), got.raw_data(), d, nullptr);
      check_same(got, y, 0, "max_pool2d");
      Tensor dy = uniform(y.shape(), dt, -1, 1, 6);
      Tensor dx = Tensor::empty(c.x, dt);
      cuda_launch::max_pool_grad(code(dt), x.raw_data(), dy.raw_data(), dx.raw_data(), d,
                                 nullptr);
      check_same(dx, max_pool2d_grad(x, dy, p), 0, "max_pool2d_grad");
      Tensor xs = uniform(c.x, dt, -2, 2, 7);
      cuda_launch::avg_pool(code(dt), xs.raw_data(), got.raw_data(), d, nullptr);
      check_same(got, avg_pool2d(xs, p), 0, "avg_pool2d");
      cuda_launch::avg_pool_grad(code(dt), dy.raw_data(), dx.raw_data(), d, nullptr);
      check_same(dx, avg_pool2d_grad(c.x, dy, p), 0, "avg_pool2d_grad");
    }
  }
}

TEST_CASE("LRN launchers give the CPU's bits") {
  const std::vector<LrnParams> params = {
      {5, 1.0, 1.0, 0.5}, {2, 2.0, 1e-4, 0.75}, {1, 1.0, 0.5, 1.0}, {3, 1.5, 0.1, 0.6},
      {20, 1.0, 0.01, 0.75}, {0, 1.0, 1.0, 0.75}};
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const LrnParams& p : params) {
      INFO(dtype_name(dt) << " radius " << p.depth_radius << " beta " << p.beta);
      const Shape shape{2, 3, 4, 11};
      Tensor x = uniform(shape, dt, -2, 2, 8), dy = uniform(shape, dt, -1, 1, 9);
      const cuda_launch::LrnDims d{24, 11, std::min<int64_t>(p.depth_radius, 11), p.bias, p.alpha,
                                   p.beta};
      Tensor y = Tensor::empty(shape, dt), dx = Tensor::empty(shape, dt);
      Tensor den = Tensor::empty(shape, dt), scale = Tensor::empty(shape, dt);
      cuda_launch::lrn(code(dt), x.raw_data(), y.raw_data(), d, nullptr);
      check_same(y, local_response_normalization(x, p), 0, "lrn");
      cuda_launch::lrn_grad(code(dt), x.raw_data(), dy.raw_data(), dx.raw_data(), den.raw_data(),
                            scale.raw_data(), d, nullptr);
      check_same(dx, local_response_normalization_grad(x, dy, p), 0, "lrn_grad");
    }
  }
}
