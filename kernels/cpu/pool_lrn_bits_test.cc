// The CPU pooling and local response normalisation kernels against plain scalar loops that spell
// out their arithmetic (the order of every sum, the tie and NaN rules), compared bit for bit: the
// kernels' vectorized channel loops, their AVX-512/AVX2 copies and their split over the thread
// pool must not change a single result. Inputs are full of ties, signed zeros, infinities and
// NaNs, channel counts are not multiples of any vector width, and the batches are large enough
// for the split to run on a pool of two or more threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/kernels.h"

using namespace dtensor;
using namespace dtensor::kernels;

namespace {

using Rng = std::mt19937_64;

// Values drawn from a small set, so that windows hold ties, plus the special values.
Tensor tie_tensor(const Shape& shape, Rng& rng, bool specials) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> plain = {-1.5f, -0.0f, 0.0f, 0.25f, 0.5f, 2.0f};
  const std::vector<float> special = {inf, -inf, std::nanf("")};
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const bool pick_special = specials && std::uniform_int_distribution<int>(0, 49)(rng) == 0;
    const std::vector<float>& from = pick_special ? special : plain;
    t.data<float>()[i] = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
  }
  return t;
}

Tensor uniform_tensor(const Shape& shape, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::uniform_real_distribution<float> d(-2, 2);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

void check_same_bits(const Tensor& got, const std::vector<float>& want) {
  REQUIRE(got.num_elements() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, got.data<float>() + i, sizeof(a));
    std::memcpy(&b, &want[i], sizeof(b));
    const bool both_nan = std::isnan(got.data<float>()[i]) && std::isnan(want[i]);
    INFO("element " << i << ": got " << got.data<float>()[i] << ", want " << want[i]);
    REQUIRE((a == b || both_nan));
  }
}

// The windows of a pooling, visited as the reference loops need them.
struct Pooling {
  Shape x;
  Pool2dParams p;
  int64_t oh, ow;
  Pooling(Shape shape, Pool2dParams params) : x(std::move(shape)), p(params) {
    oh = conv_output_size(x[1], p.pad_top, p.pad_bottom, p.window_h, 1, p.stride_h);
    ow = conv_output_size(x[2], p.pad_left, p.pad_right, p.window_w, 1, p.stride_w);
  }
  int64_t at(int64_t b, int64_t h, int64_t w) const { return ((b * x[1] + h) * x[2] + w) * x[3]; }
  // Calls fn(output offset, input offsets of the window's unpadded positions, in order).
  template <typename Fn>
  void each_window(Fn&& fn) const {
    for (int64_t b = 0; b < x[0]; ++b)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          std::vector<int64_t> in;
          for (int64_t h = i * p.stride_h - p.pad_top; h < i * p.stride_h - p.pad_top + p.window_h;
               ++h)
            for (int64_t w = j * p.stride_w - p.pad_left;
                 w < j * p.stride_w - p.pad_left + p.window_w; ++w)
              if (h >= 0 && h < x[1] && w >= 0 && w < x[2]) in.push_back(at(b, h, w));
          fn(((b * oh + i) * ow + j) * x[3], in);
        }
  }
};

float max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

std::vector<Pooling> poolings() {
  Pool2dParams same;  // the CIFAR-10 model's 3x3/2 SAME pools
  same.window_h = same.window_w = 3;
  same.stride_h = same.stride_w = 2;
  same.pad_bottom = same.pad_right = 1;
  Pool2dParams odd;
  odd.window_h = 2, odd.window_w = 3;
  odd.stride_h = 1, odd.stride_w = 2;
  odd.pad_top = 1, odd.pad_left = 2, odd.pad_right = 1;
  return {Pooling({8, 12, 12, 37}, same), Pooling({3, 7, 9, 19}, odd), Pooling({2, 5, 5, 1}, same)};
}

}  // namespace

TEST_CASE("max pooling and its gradient give the bits of the scalar loops, ties and NaN included") {
  Rng rng(28);
  for (const Pooling& g : poolings()) {
    INFO("x [" << g.x[0] << "," << g.x[1] << "," << g.x[2] << "," << g.x[3] << "]");
    const int64_t c = g.x[3];
    for (bool specials : {false, true}) {
      const Tensor x = tie_tensor(g.x, rng, specials);
      const Tensor dy = specials ? tie_tensor({g.x[0], g.oh, g.ow, c}, rng, true)
                                 : uniform_tensor({g.x[0], g.oh, g.ow, c}, rng);
      const float* xv = x.data<float>();
      const float* dyv = dy.data<float>();
      std::vector<float> y(static_cast<size_t>(dy.num_elements()));
      std::vector<float> dx(static_cast<size_t>(x.num_elements()), 0.0f);
      g.each_window([&](int64_t out, const std::vector<int64_t>& in) {
        for (int64_t ch = 0; ch < c; ++ch) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t i : in) m = max_nan(m, xv[i + ch]);
          y[out + ch] = m;
          float taken = 0;  // the first position equal to the maximum (or NaN) gets dy
          for (int64_t i : in) {
            const bool is_max = xv[i + ch] == m || (xv[i + ch] != xv[i + ch] && m != m);
            const float hit = (is_max && taken == 0) ? 1.0f : 0.0f;
            dx[i + ch] += hit * dyv[out + ch];
            taken += hit;
          }
        }
      });
      check_same_bits(max_pool2d(x, g.p), y);
      check_same_bits(max_pool2d_grad(x, dy, g.p), dx);
    }
  }
}

TEST_CASE("avg pooling and its gradient give the bits of the scalar loops") {
  Rng rng(29);
  for (const Pooling& g : poolings()) {
    const int64_t c = g.x[3];
    const Tensor x = uniform_tensor(g.x, rng);
    const Tensor dy = uniform_tensor({g.x[0], g.oh, g.ow, c}, rng);
    std::vector<float> y(static_cast<size_t>(dy.num_elements()));
    std::vector<float> dx(static_cast<size_t>(x.num_elements()), 0.0f);
    g.each_window([&](int64_t out, const std::vector<int64_t>& in) {
      const float inv = 1.0f / static_cast<float>(in.size());
      for (int64_t ch = 0; ch < c; ++ch) {
        float s = 0;
        for (int64_t i : in) s += x.data<float>()[i + ch];
        y[out + ch] = s * inv;
        for (int64_t i : in) dx[i + ch] += dy.data<float>()[out + ch] * inv;
      }
    });
    check_same_bits(avg_pool2d(x, g.p), y);
    check_same_bits(avg_pool2d_grad(g.x, dy, g.p), dx);
  }
}

TEST_CASE("local response normalisation and its gradient give the bits of the scalar loops") {
  Rng rng(30);
  // [rows, n]: the model's 64 channels over enough rows for the pool split; odd widths; a radius
  // wider than the row.
  for (const LrnParams& p : {LrnParams{4, 1.0, 0.001 / 9.0, 0.75}, LrnParams{2, 2.0, 0.3, 0.5},
                             LrnParams{1, 1.0, 0.5, 1.0}, LrnParams{9, 1.5, 0.2, 0.6}}) {
    for (const Shape& shape : {Shape{16, 12, 12, 64}, Shape{5, 3, 33}, Shape{7, 5}}) {
      INFO("radius " << p.depth_radius << ", beta " << p.beta << ", channels " << shape.back());
      const Tensor x = uniform_tensor(shape, rng), dy = uniform_tensor(shape, rng);
      const int64_t n = shape.back(), rows = x.num_elements() / n;
      const int64_t r = std::min(p.depth_radius, n);
      const float bias = static_cast<float>(p.bias), alpha = static_cast<float>(p.alpha);
      const float k = static_cast<float>(2 * p.alpha * p.beta);
      auto pow_neg_beta = [&](float d) {
        if (p.beta == 0.75) {
          const float s = 1.0f / std::sqrt(d);
          return s * std::sqrt(s);
        }
        if (p.beta == 0.5) return 1.0f / std::sqrt(d);
        if (p.beta == 1.0) return 1.0f / d;
        return static_cast<float>(std::pow(d, -p.beta));
      };
      // sum over |c' - c| <= r of v(c'), lowest c' first (the kernel's padding adds zeros).
      auto window = [&](int64_t c, auto&& v) {
        float s = 0;
        for (int64_t j = c - r; j <= c + r; ++j) s += (j >= 0 && j < n) ? v(j) : 0.0f;
        return s;
      };
      std::vector<float> y(static_cast<size_t>(x.num_elements())), dx(y.size());
      for (int64_t row = 0; row < rows; ++row) {
        const float* xr = x.data<float>() + row * n;
        const float* gr = dy.data<float>() + row * n;
        std::vector<float> d(static_cast<size_t>(n)), sc(d.size());
        for (int64_t c = 0; c < n; ++c) {
          d[c] = bias + alpha * window(c, [&](int64_t j) { return xr[j] * xr[j]; });
          sc[c] = pow_neg_beta(d[c]);
          y[row * n + c] = xr[c] * sc[c];
        }
        for (int64_t c = 0; c < n; ++c) {
          const float t = window(c, [&](int64_t j) { return gr[j] * xr[j] * sc[j] / d[j]; });
          dx[row * n + c] = gr[c] * sc[c] - k * xr[c] * t;
        }
      }
      check_same_bits(local_response_normalization(x, p), y);
      check_same_bits(local_response_normalization_grad(x, dy, p), dx);
    }
  }
}
