// The CNN ops (conv2d and its gradients, pooling, local response normalisation, bias_add,
// flatten, dropout): each against a naive single-device reference written from the definition,
// then on random layouts of the standard meshes (batch, channels, spatial, uneven, partial)
// against the single-device result; the collectives the expansions emit; and the exact errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "dtensor/collectives.h"
#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::distribute_with_terms;
using dtensor::testing::standard_meshes;
using dtensor::testing::test_mesh;

namespace {

using Rng = std::mt19937_64;

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Multiples of 1/64 in [-1, 1]: exact in bf16, and sums of products of a few hundred are exact
// in f32, so layouts that only reorder sums agree closely.
Tensor values(const Shape& shape, Rng& rng, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data<double>()[i] = uniform_int(rng, -64, 64) / 64.0;
  return kernels::cast(t, dtype);
}

double at(const Tensor& t, int64_t i) { return kernels::cast(t, DType::kF64).data<double>()[i]; }

void check_close(const Tensor& got, const Tensor& want, const std::string& what,
                 double tolerance = 1e-5) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const Tensor g = kernels::cast(got, DType::kF64), w = kernels::cast(want, DType::kF64);
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    const double a = g.data<double>()[i], b = w.data<double>()[i];
    INFO("element " << i << ": got " << a << ", want " << b);
    REQUIRE(std::abs(a - b) <= tolerance * std::max(1.0, std::abs(b)));
  }
}

// ---- Naive references, from the definitions (f64) ----------------------------------------------

// TF's padding of one spatial dim: (before, after).
std::pair<int64_t, int64_t> tf_padding(const Padding2d& p, bool h, int64_t in, int64_t extent,
                                       int64_t stride) {
  if (p.kind == Padding2d::kExplicit)
    return h ? std::make_pair(p.top, p.bottom) : std::make_pair(p.left, p.right);
  if (p.kind == Padding2d::kValid) return {0, 0};
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + extent - in);
  return {total / 2, total - total / 2};
}

struct RefConv {
  Shape x, w, y;
  int64_t pt = 0, pl = 0, sh = 1, sw = 1, dh = 1, dw = 1, groups = 1;
  bool valid = false;  // the window fits

  RefConv(const Shape& xs, const Shape& ws, const Conv2dOptions& o) : x(xs), w(ws) {
    sh = o.strides[0], sw = o.strides[1], dh = o.dilations[0], dw = o.dilations[1];
    groups = o.groups;
    const auto [t, b] = tf_padding(o.padding, true, x[1], (w[0] - 1) * dh + 1, sh);
    const auto [l, r] = tf_padding(o.padding, false, x[2], (w[1] - 1) * dw + 1, sw);
    pt = t, pl = l;
    const int64_t span_h = x[1] + t + b - (w[0] - 1) * dh - 1;
    const int64_t span_w = x[2] + l + r - (w[1] - 1) * dw - 1;
    valid = span_h >= 0 && span_w >= 0;
    y = {x[0], valid ? span_h / sh + 1 : 0, valid ? span_w / sw + 1 : 0, w[3]};
  }

  // Calls f(x index, w index, y index) for every product of the convolution's sum.
  void for_each_term(const std::function<void(int64_t, int64_t, int64_t)>& f) const {
    const int64_t cpg = w[2], opg = w[3] / groups;
    for (int64_t n = 0; n < y[0]; ++n)
      for (int64_t oh = 0; oh < y[1]; ++oh)
        for (int64_t ow = 0; ow < y[2]; ++ow)
          for (int64_t o = 0; o < y[3]; ++o)
            for (int64_t i = 0; i < w[0]; ++i)
              for (int64_t j = 0; j < w[1]; ++j)
                for (int64_t ci = 0; ci < cpg; ++ci) {
                  const int64_t ih = oh * sh - pt + i * dh, iw = ow * sw - pl + j * dw;
                  if (ih < 0 || ih >= x[1] || iw < 0 || iw >= x[2]) continue;
                  const int64_t c = o / opg * cpg + ci;
                  f(((n * x[1] + ih) * x[2] + iw) * x[3] + c,
                    ((i * w[1] + j) * w[2] + ci) * w[3] + o,
                    ((n * y[1] + oh) * y[2] + ow) * y[3] + o);
                }
  }
};

Tensor f64(const Tensor& t) { return kernels::cast(t, DType::kF64); }

Tensor ref_conv2d(const Tensor& x_in, const Tensor& w_in, const Conv2dOptions& o) {
  const RefConv r(x_in.shape(), w_in.shape(), o);
  const Tensor x = f64(x_in), w = f64(w_in);
  Tensor y = Tensor::zeros(r.y, DType::kF64);
  r.for_each_term([&](int64_t xi, int64_t wi, int64_t yi) {
    y.data<double>()[yi] += x.data<double>()[xi] * w.data<double>()[wi];
  });
  return y;
}

Tensor ref_backprop_input(const Shape& x_shape, const Tensor& w_in, const Tensor& dy_in,
                          const Conv2dOptions& o) {
  const RefConv r(x_shape, w_in.shape(), o);
  const Tensor w = f64(w_in), dy = f64(dy_in);
  Tensor dx = Tensor::zeros(x_shape, DType::kF64);
  r.for_each_term([&](int64_t xi, int64_t wi, int64_t yi) {
    dx.data<double>()[xi] += dy.data<double>()[yi] * w.data<double>()[wi];
  });
  return dx;
}

Tensor ref_backprop_filter(const Tensor& x_in, const Shape& w_shape, const Tensor& dy_in,
                           const Conv2dOptions& o) {
  const RefConv r(x_in.shape(), w_shape, o);
  const Tensor x = f64(x_in), dy = f64(dy_in);
  Tensor dw = Tensor::zeros(w_shape, DType::kF64);
  r.for_each_term([&](int64_t xi, int64_t wi, int64_t yi) {
    dw.data<double>()[wi] += x.data<double>()[xi] * dy.data<double>()[yi];
  });
  return dw;
}

// Pooling: max or mean over the unpadded positions of each window; nullopt if it does not fit.
std::optional<Tensor> ref_pool(const Tensor& x_in, const Pool2dOptions& o, bool max) {
  const Tensor x = f64(x_in);
  const Shape& s = x.shape();
  const auto [t, b] = tf_padding(o.padding, true, s[1], o.window[0], o.strides[0]);
  const auto [l, r] = tf_padding(o.padding, false, s[2], o.window[1], o.strides[1]);
  const int64_t span_h = s[1] + t + b - o.window[0], span_w = s[2] + l + r - o.window[1];
  if (span_h < 0 || span_w < 0) return std::nullopt;
  Tensor y = Tensor::empty({s[0], span_h / o.strides[0] + 1, span_w / o.strides[1] + 1, s[3]},
                           DType::kF64);
  const Shape& ys = y.shape();
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t oh = 0; oh < ys[1]; ++oh)
      for (int64_t ow = 0; ow < ys[2]; ++ow)
        for (int64_t c = 0; c < ys[3]; ++c) {
          double acc = max ? -INFINITY : 0.0;
          int64_t count = 0;
          for (int64_t i = 0; i < o.window[0]; ++i)
            for (int64_t j = 0; j < o.window[1]; ++j) {
              const int64_t ih = oh * o.strides[0] - t + i, iw = ow * o.strides[1] - l + j;
              if (ih < 0 || ih >= s[1] || iw < 0 || iw >= s[2]) continue;
              const double v = x.data<double>()[((n * s[1] + ih) * s[2] + iw) * s[3] + c];
              acc = max ? std::max(acc, v) : acc + v;
              ++count;
            }
          y.data<double>()[((n * ys[1] + oh) * ys[2] + ow) * ys[3] + c] = max ? acc : acc / count;
        }
  return y;
}

Tensor ref_lrn(const Tensor& x_in, int64_t radius, double bias, double alpha, double beta) {
  const Tensor x = f64(x_in);
  const int64_t c = x.shape().back();
  Tensor y = Tensor::empty(x.shape(), DType::kF64);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t ch = i % c;
    double sum = 0;
    for (int64_t k = std::max<int64_t>(0, ch - radius); k <= std::min(c - 1, ch + radius); ++k) {
      const double v = x.data<double>()[i - ch + k];
      sum += v * v;
    }
    y.data<double>()[i] = x.data<double>()[i] / std::pow(bias + alpha * sum, beta);
  }
  return y;
}

// ---- Random geometries and layouts ------------------------------------------------------------

Padding2d random_padding(Rng& rng) {
  switch (uniform_int(rng, 0, 2)) {
    case 0:
      return {Padding2d::kValid};
    case 1:
      return {Padding2d::kSame};
    default:
      return {Padding2d::kExplicit, uniform_int(rng, 0, 2), uniform_int(rng, 0, 2),
              uniform_int(rng, 0, 2), uniform_int(rng, 0, 2)};
  }
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions options;
  Shape y;
};

ConvCase random_conv(Rng& rng) {
  while (true) {
    ConvCase c;
    c.options.groups = uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, 2, 4) : 1;
    const int64_t cpg = uniform_int(rng, 1, 4), opg = uniform_int(rng, 1, 4);
    c.x = {uniform_int(rng, 1, 9), uniform_int(rng, 1, 8), uniform_int(rng, 1, 8),
           cpg * c.options.groups};
    c.w = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3), cpg, opg * c.options.groups};
    c.options.strides = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3)};
    c.options.dilations = {uniform_int(rng, 1, 2), uniform_int(rng, 1, 2)};
    c.options.padding = random_padding(rng);
    const RefConv r(c.x, c.w, c.options);
    if (!r.valid) continue;
    c.y = r.y;
    return c;
  }
}

Pool2dOptions random_pool(Rng& rng, const Shape& x) {
  while (true) {
    Pool2dOptions o;
    o.window = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3)};
    o.strides = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3)};
    o.padding = random_padding(rng);
    if (o.padding.kind == Padding2d::kExplicit) {
      o.padding.top = std::min(o.padding.top, o.window[0] - 1);
      o.padding.bottom = std::min(o.padding.bottom, o.window[0] - 1);
      o.padding.left = std::min(o.padding.left, o.window[1] - 1);
      o.padding.right = std::min(o.padding.right, o.window[1] - 1);
    }
    if (ref_pool(Tensor::zeros(x, DType::kF32), o, true)) return o;
  }
}

class Placer {
 public:
  explicit Placer(uint64_t seed) : rng_(seed), meshes_(standard_meshes()) {}
  Rng& rng() { return rng_; }
  const Mesh& mesh() { return meshes_[static_cast<size_t>(uniform_int(rng_, 0, 2))]; }
  // `t` on `mesh` in a random layout (partial sums included).
  DTensor put(const Tensor& t, const Mesh& mesh) {
    auto key = std::make_pair(mesh.fingerprint(), t.rank());
    auto it = layouts_.find(key);
    if (it == layouts_.end()) it = layouts_.emplace(key, all_layouts(mesh, t.rank(), true)).first;
    const Layout& l = it->second[static_cast<size_t>(
        uniform_int(rng_, 0, static_cast<int64_t>(it->second.size()) - 1))];
    return distribute_with_terms(t, l, rng_());
  }

 private:
  Rng rng_;
  std::vector<Mesh> meshes_;
  std::map<std::pair<uint64_t, int64_t>, std::vector<Layout>> layouts_;
};

std::string describe(const std::vector<DTensor>& inputs) {
  std::string s;
  for (const DTensor& d : inputs) s += d.short_string() + " on " + d.mesh().dims_string() + "; ";
  return s;
}

// The single-device computation: replicated, each device computes the whole op as one device
// would (a mesh of one device cannot span the processes of an mpirun job).
DTensor on_one_device(const Tensor& t) {
  static const Mesh one = test_mesh({{"d", 8}});
  return distribute(t, Layout::replicated(one, t.rank()));
}

constexpr int kCases = 60;

}  // namespace

// ---- Single device against the references ----------------------------------------------------

TEST_CASE("conv2d and its gradients match the naive reference on one device") {
  Rng rng(1);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    const double tol = dtype == DType::kBF16 ? 1e-2 : 1e-5;
    for (int i = 0; i < kCases; ++i) {
      const ConvCase c = random_conv(rng);
      const Tensor x = values(c.x, rng, dtype), w = values(c.w, rng, dtype),
                   dy = values(c.y, rng, dtype);
      const std::string what =
          fmt::format("{} x [{}] w [{}] groups {}", dtype_name(dtype), fmt::join(c.x, ","),
                      fmt::join(c.w, ","), c.options.groups);
      check_close(to_global(conv2d(on_one_device(x), on_one_device(w), c.options)),
                  ref_conv2d(x, w, c.options), "conv2d " + what, tol);
      check_close(
          to_global(conv2d_backprop_input(c.x, on_one_device(w), on_one_device(dy), c.options)),
          ref_backprop_input(c.x, w, dy, c.options), "backprop_input " + what, tol);
      check_close(
          to_global(conv2d_backprop_filter(on_one_device(x), c.w, on_one_device(dy), c.options)),
          ref_backprop_filter(x, c.w, dy, c.options), "backprop_filter " + what, tol);
    }
  }
}

TEST_CASE("the tutorial's conv shapes run on oneDNN and match the direct f64 loop") {
  Rng rng(2);
  Conv2dOptions same;
  same.padding = {Padding2d::kSame};
  for (const auto& [xs, ws] : std::vector<std::pair<Shape, Shape>>{
           {{4, 24, 24, 3}, {5, 5, 3, 64}}, {{4, 12, 12, 64}, {5, 5, 64, 64}}}) {
    const Tensor x = values(xs, rng), w = values(ws, rng);
    Tensor dy = values({xs[0], xs[1], xs[2], ws[3]}, rng);
    const Tensor want = kernels::conv2d(f64(x), f64(w), {1, 1, 1, 1, 2, 2, 2, 2});
    check_close(to_global(conv2d(on_one_device(x), on_one_device(w), same)), want, "forward");
    check_close(to_global(conv2d_backprop_input(xs, on_one_device(w), on_one_device(dy), same)),
                kernels::conv2d_backprop_input(xs, f64(w), f64(dy), {1, 1, 1, 1, 2, 2, 2, 2}),
                "backprop_input");
    check_close(to_global(conv2d_backprop_filter(on_one_device(x), ws, on_one_device(dy), same)),
                kernels::conv2d_backprop_filter(f64(x), ws, f64(dy), {1, 1, 1, 1, 2, 2, 2, 2}),
                "backprop_filter");
  }
}

TEST_CASE("pooling and local response normalisation match the naive reference") {
  Rng rng(3);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    const double tol = dtype == DType::kBF16 ? 1e-2 : 1e-5;
    for (int i = 0; i < kCases; ++i) {
      const Shape s = {uniform_int(rng, 1, 4), uniform_int(rng, 1, 7), uniform_int(rng, 1, 7),
                       uniform_int(rng, 1, 9)};
      const Tensor x = values(s, rng, dtype);
      const Pool2dOptions o = random_pool(rng, s);
      const std::string what = fmt::format("{} x [{}]", dtype_name(dtype), fmt::join(s, ","));
      check_close(to_global(max_pool2d(on_one_device(x), o)), *ref_pool(x, o, true),
                  "max_pool2d " + what, tol);
      check_close(to_global(avg_pool2d(on_one_device(x), o)), *ref_pool(x, o, false),
                  "avg_pool2d " + what, tol);
      const int64_t radius = uniform_int(rng, 0, 5);
      check_close(
          to_global(local_response_normalization(on_one_device(x), radius, 1.0, 0.001 / 9, 0.75)),
          ref_lrn(x, radius, 1.0, 0.001 / 9, 0.75), "lrn " + what, tol);
      check_close(to_global(local_response_normalization(on_one_device(x))),
                  ref_lrn(x, 5, 1.0, 1.0, 0.5), "lrn defaults " + what, tol);
      check_close(to_global(local_response_normalization(on_one_device(x), radius, 2.0, 0.3, 0.6)),
                  ref_lrn(x, radius, 2.0, 0.3, 0.6), "lrn beta 0.6 " + what, tol);
    }
  }
}

TEST_CASE("bias_add and flatten") {
  Rng rng(4);
  const Tensor x = values({3, 2, 4, 5}, rng), b = values({5}, rng);
  const Tensor y = to_global(bias_add(on_one_device(x), on_one_device(b)));
  for (int64_t i = 0; i < x.num_elements(); ++i) CHECK(at(y, i) == at(x, i) + at(b, i % 5));
  const Tensor f = to_global(flatten(on_one_device(x)));
  CHECK(f.shape() == Shape{3, 40});
  for (int64_t i = 0; i < x.num_elements(); ++i) CHECK(at(f, i) == at(x, i));
  CHECK(to_global(flatten(on_one_device(values({4}, rng)))).shape() == Shape{4, 1});
}

// ---- Every layout gives the single-device result ---------------------------------------------

TEST_CASE("conv2d and its gradients on random layouts equal one device") {
  Placer p(5);
  for (int i = 0; i < 3 * kCases; ++i) {
    const ConvCase c = random_conv(p.rng());
    const Mesh& mesh = p.mesh();
    const Tensor x = values(c.x, p.rng()), w = values(c.w, p.rng()), dy = values(c.y, p.rng());
    const DTensor dx = p.put(x, mesh), dw = p.put(w, mesh), ddy = p.put(dy, mesh);
    const std::string groups = fmt::format(" groups {}", c.options.groups);
    check_close(to_global(conv2d(dx, dw, c.options)), ref_conv2d(x, w, c.options),
                "conv2d " + describe({dx, dw}) + groups);
    check_close(to_global(conv2d_backprop_input(c.x, dw, ddy, c.options)),
                ref_backprop_input(c.x, w, dy, c.options),
                "backprop_input " + describe({dw, ddy}) + groups);
    check_close(to_global(conv2d_backprop_filter(dx, c.w, ddy, c.options)),
                ref_backprop_filter(x, c.w, dy, c.options),
                "backprop_filter " + describe({dx, ddy}) + groups);
  }
}

TEST_CASE("grouped conv2d with whole groups per device equals one device") {
  Placer p(6);
  for (const Mesh& mesh : standard_meshes()) {
    for (int64_t groups : {8, 16}) {
      Conv2dOptions o;
      o.groups = groups;
      o.padding = {Padding2d::kSame};
      const Tensor x = values({3, 5, 4, groups}, p.rng()),
                   w = values({3, 3, 1, 2 * groups}, p.rng());
      for (const Layout& lx : all_layouts(mesh, 4, false)) {
        const DTensor dx = distribute(x, lx);
        const DTensor dw = distribute(
            w, Layout({"unsharded", "unsharded", "unsharded", mesh.dims()[0].name}, mesh));
        check_close(to_global(conv2d(dx, dw, o)), ref_conv2d(x, w, o),
                    "grouped " + describe({dx, dw}));
      }
    }
  }
}

TEST_CASE("pooling, lrn, bias_add, flatten on random layouts equal one device") {
  Placer p(7);
  for (int i = 0; i < 2 * kCases; ++i) {
    const Shape s = {uniform_int(p.rng(), 1, 9), uniform_int(p.rng(), 1, 7),
                     uniform_int(p.rng(), 1, 7), uniform_int(p.rng(), 1, 9)};
    const Mesh& mesh = p.mesh();
    const Tensor x = values(s, p.rng());
    const Pool2dOptions o = random_pool(p.rng(), s);
    const DTensor dx = p.put(x, mesh);
    check_close(to_global(max_pool2d(dx, o)), *ref_pool(x, o, true),
                "max_pool2d " + describe({dx}));
    check_close(to_global(avg_pool2d(dx, o)), *ref_pool(x, o, false),
                "avg_pool2d " + describe({dx}));
    check_close(to_global(local_response_normalization(dx, 2, 1.0, 0.001 / 9, 0.75)),
                ref_lrn(x, 2, 1.0, 0.001 / 9, 0.75), "lrn " + describe({dx}));
    const Tensor b = values({s[3]}, p.rng());
    const DTensor db = p.put(b, mesh);
    check_close(to_global(bias_add(dx, db)), kernels::binary(kernels::BinaryOp::kAdd, x, b),
                "bias_add " + describe({dx, db}));
    check_close(to_global(flatten(dx)),
                kernels::transpose(x, {0, 1, 2, 3}).reshaped({s[0], s[1] * s[2] * s[3]}),
                "flatten " + describe({dx}));
  }
}

// Gradients through a small CNN (conv, bias, relu, pool, lrn, flatten, dense) on sharded layouts
// equal the single-device gradients.
TEST_CASE("a CNN's gradients on sharded layouts equal one device") {
  // f64: partial inputs carry integer noise terms, whose cancellation f32 would round.
  Placer p(8);
  const Tensor x = values({5, 6, 6, 3}, p.rng(), DType::kF64),
               w1 = values({3, 3, 3, 4}, p.rng(), DType::kF64),
               b1 = values({4}, p.rng(), DType::kF64), w2 = values({36, 3}, p.rng(), DType::kF64);
  Conv2dOptions same;
  same.padding = {Padding2d::kSame};
  auto loss_and_grads = [&](const DTensor& dx, const DTensor& dw1, const DTensor& db1,
                            const DTensor& dw2) {
    GradientTape tape;
    tape.watch(dw1);
    tape.watch(db1);
    tape.watch(dw2);
    DTensor h = relu(bias_add(conv2d(dx, dw1, same), db1));
    h = local_response_normalization(max_pool2d(h, {{3, 3}, {2, 2}, {Padding2d::kSame}}), 2, 1.0,
                                     0.01, 0.75);
    DTensor loss = reduce_sum(square(matmul(flatten(h), dw2)));
    std::vector<DTensor> g = tape.gradient(loss, {dw1, db1, dw2});
    return std::vector<Tensor>{to_global(loss), to_global(g[0]), to_global(g[1]), to_global(g[2])};
  };
  const std::vector<Tensor> want =
      loss_and_grads(on_one_device(x), on_one_device(w1), on_one_device(b1), on_one_device(w2));
  for (int i = 0; i < 30; ++i) {
    const Mesh& mesh = p.mesh();
    const DTensor dx = p.put(x, mesh), dw1 = p.put(w1, mesh), db1 = p.put(b1, mesh),
                  dw2 = p.put(w2, mesh);
    const std::vector<Tensor> got = loss_and_grads(dx, dw1, db1, dw2);
    for (size_t k = 0; k < got.size(); ++k) {
      check_close(got[k], want[k],
                  fmt::format("output {} with {}", k, describe({dx, dw1, db1, dw2})), 1e-4);
    }
  }
}

// The fused form against the ops it fuses: one device (oneDNN's f32 epilogue) and random layouts
// (f64, partial terms included; a partial or spatially sharded convolution runs them unfused).
TEST_CASE("conv2d with a fused bias and ReLU equals relu(bias_add(conv2d)), value and gradients") {
  Placer p(10);
  Conv2dOptions same;
  same.padding = {Padding2d::kSame};
  auto run = [&](bool fused, const DTensor& dx, const DTensor& dw, const DTensor& db,
                 const Tensor& r) {
    GradientTape tape;
    for (const DTensor* t : {&dx, &dw, &db}) tape.watch(*t);
    const DTensor y = fused ? conv2d(dx, dw, db, DenseActivation::kRelu, same)
                            : relu(bias_add(conv2d(dx, dw, same), db));
    const DTensor loss = reduce_sum(mul(y, distribute(r, Layout::replicated(y.mesh(), 4))));
    std::vector<Tensor> out{to_global(y)};
    for (const DTensor& g : tape.gradient(loss, {dx, dw, db})) out.push_back(to_global(g));
    return out;
  };
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor x = values({5, 6, 6, 4}, p.rng(), dtype), w = values({3, 3, 4, 6}, p.rng(), dtype),
                 b = values({6}, p.rng(), dtype), r = values({5, 6, 6, 6}, p.rng(), dtype);
    const std::vector<Tensor> want =
        run(false, on_one_device(x), on_one_device(w), on_one_device(b), r);
    const std::vector<Tensor> one =
        run(true, on_one_device(x), on_one_device(w), on_one_device(b), r);
    for (size_t k = 0; k < want.size(); ++k) {
      check_close(one[k], want[k], fmt::format("{} one device, output {}", dtype_name(dtype), k));
    }
    if (dtype == DType::kF32) continue;
    for (int i = 0; i < 30; ++i) {
      const Mesh& mesh = p.mesh();
      const DTensor dx = p.put(x, mesh), dw = p.put(w, mesh), db = p.put(b, mesh);
      const std::vector<Tensor> got = run(true, dx, dw, db, r);
      for (size_t k = 0; k < got.size(); ++k) {
        check_close(got[k], want[k], fmt::format("output {} with {}", k, describe({dx, dw, db})),
                    1e-9);
      }
    }
  }
}

// ---- Dropout ---------------------------------------------------------------------------------

TEST_CASE("dropout keeps the same elements on every mesh and layout") {
  Placer p(9);
  const Tensor x = values({16, 7, 5}, p.rng());
  const double rate = 0.3;
  const Tensor want = to_global(dropout(on_one_device(x), rate, 1234));
  int64_t kept = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const double v = at(want, i);
    if (v != 0.0) {
      ++kept;
      CHECK(v == Approx(at(x, i) / (1 - rate)).epsilon(1e-6));
    }
  }
  CHECK(std::abs(static_cast<double>(kept) / static_cast<double>(x.num_elements()) - 0.7) < 0.06);
  for (const Mesh& mesh : standard_meshes()) {
    for (const Layout& l : all_layouts(mesh, 3, false)) {
      const DTensor dx = distribute(x, l);
      check_close(to_global(dropout(dx, rate, 1234)), want, "dropout " + describe({dx}), 0.0);
    }
  }
  CHECK(bitwise_equal(to_global(dropout(on_one_device(x), rate, 1234, false)), x));
  CHECK(bitwise_equal(to_global(dropout(on_one_device(x), 0.0, 1234)), x));
  CHECK_FALSE(bitwise_equal(to_global(dropout(on_one_device(x), rate, 1235)), want));
}

// ---- Collectives -------------------------------------------------------------------------------

TEST_CASE("conv expansions emit only the collectives the layouts force", "[local]") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  Rng rng(10);
  const Tensor x = values({16, 6, 6, 8}, rng), w = values({3, 3, 8, 16}, rng);
  Conv2dOptions same;
  same.padding = {Padding2d::kSame};
  const Tensor want = ref_conv2d(x, w, same);
  auto layout = [&](std::vector<std::string> specs) { return Layout(std::move(specs), mesh); };
  const std::string u = Layout::kUnsharded;

  SECTION("data parallel: nothing forward or backward, one all-reduce for the filter gradient") {
    const DTensor dx = distribute(x, Layout::batch_sharded(mesh, "batch", 4));
    const DTensor dw = distribute(w, Layout::replicated(mesh, 4));
    reset_collective_stats();
    GradientTape tape;
    tape.watch(dw);
    const DTensor y = max_pool2d(relu(conv2d(dx, dw, same)), {{3, 3}, {2, 2}, {Padding2d::kSame}});
    CHECK(y.layout() == Layout::batch_sharded(mesh, "batch", 4));
    const DTensor loss = reduce_sum(y);
    const DTensor g = tape.gradient(loss, {dw})[0];
    CHECK(collective_stats().total() == 0);
    CHECK(g.layout().is_partial());
    const DTensor g_rep = relayout(g, Layout::replicated(mesh, 4));
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
    CHECK(collective_stats().total() == 1);
  }
  SECTION("batch-sharded forward emits nothing; the output stays batch-sharded") {
    const DTensor dx = distribute(x, Layout::batch_sharded(mesh, "batch", 4));
    const DTensor dw = distribute(w, Layout::replicated(mesh, 4));
    reset_collective_stats();
    const DTensor y = conv2d(dx, dw, same);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == Layout::batch_sharded(mesh, "batch", 4));
    check_close(to_global(y), want, "batch-sharded");
  }
  SECTION("output-channel sharded filter: no collective, y sharded on channels") {
    const DTensor dx = distribute(x, Layout::replicated(mesh, 4));
    const DTensor dw = distribute(w, layout({u, u, u, "batch"}));
    reset_collective_stats();
    const DTensor y = conv2d(dx, dw, same);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == layout({u, u, u, "batch"}));
    check_close(to_global(y), want, "output-channel sharded");
  }
  SECTION("input-channel sharded: a partial sum, one all-reduce to replicated") {
    const DTensor dx = distribute(x, layout({u, u, u, "batch"}));
    const DTensor dw = distribute(w, layout({u, u, "batch", u}));
    reset_collective_stats();
    const DTensor y = conv2d(dx, dw, same);
    CHECK(y.layout().is_partial());
    CHECK(collective_stats().total() == 0);
    const DTensor r = relayout(y, Layout::replicated(mesh, 4));
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
    CHECK(collective_stats().total() == 1);
    check_close(to_global(r), want, "input-channel sharded");
  }
  SECTION("whole groups per device: no collective") {
    Conv2dOptions grouped = same;
    grouped.groups = 8;
    const Tensor wg = values({3, 3, 1, 16}, rng);
    const DTensor dx = distribute(x, layout({u, u, u, "batch"}));
    const DTensor dw = distribute(wg, layout({u, u, u, "batch"}));
    reset_collective_stats();
    const DTensor y = conv2d(dx, dw, grouped);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == layout({u, u, u, "batch"}));
    check_close(to_global(y), ref_conv2d(x, wg, grouped), "grouped");
  }
  SECTION("the fused conv2d on batch sharding: no collective, the bias with the channels") {
    const DTensor dx = distribute(x, Layout::batch_sharded(mesh, "batch", 4));
    const DTensor b = distribute(values({16}, rng), Layout::replicated(mesh, 1));
    reset_collective_stats();
    const DTensor y =
        conv2d(dx, distribute(w, Layout::replicated(mesh, 4)), b, DenseActivation::kRelu, same);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == dx.layout());
  }
  SECTION("pooling, lrn, bias_add and flatten on batch or channel sharding: no collective") {
    for (const Layout& l : {Layout::batch_sharded(mesh, "batch", 4), layout({u, u, u, "batch"})}) {
      const DTensor dx = distribute(x, l);
      reset_collective_stats();
      const DTensor a = avg_pool2d(dx);
      const DTensor m = max_pool2d(dx, {{3, 3}, {2, 2}, {Padding2d::kSame}});
      CHECK(collective_stats().total() == 0);
      CHECK(a.layout() == l);
      CHECK(m.layout() == l);
    }
    const DTensor dx = distribute(x, Layout::batch_sharded(mesh, "batch", 4));
    reset_collective_stats();
    const DTensor y = local_response_normalization(dx, 4, 1.0, 0.001 / 9, 0.75);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == dx.layout());
    const DTensor f =
        flatten(bias_add(y, distribute(values({8}, rng), Layout::replicated(mesh, 1))));
    CHECK(collective_stats().total() == 0);
    CHECK(f.layout() == Layout::batch_sharded(mesh, "batch", 2));
  }
  SECTION("a spatially sharded x is gathered first and gives the one-device result") {
    const DTensor dx = distribute(x, layout({u, "batch", u, u}));
    const DTensor dw = distribute(w, Layout::replicated(mesh, 4));
    const DTensor y = conv2d(dx, dw, same);
    check_close(to_global(y), want, "spatially sharded");
  }
}

// ---- Errors ------------------------------------------------------------------------------------

TEST_CASE("CNN ops reject bad inputs with exact errors") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  auto put = [&](const Shape& s, DType dtype = DType::kF32) {
    return distribute(Tensor::zeros(s, dtype),
                      Layout::replicated(mesh, static_cast<int64_t>(s.size())));
  };
  const DTensor x = put({2, 5, 5, 3}), w = put({3, 3, 3, 4});
  Conv2dOptions o;
  CHECK_THROWS_MATCHES(
      conv2d(x, put({3, 3, 2, 4}), o), ShapeError,
      Message("[conv2d] x f32[2,5,5,3] [unsharded,unsharded,unsharded,unsharded] has 3 channels "
              "but the filter f32[3,3,2,4] [unsharded,unsharded,unsharded,unsharded] expects 2 per "
              "group x 1 groups = 2"));
  CHECK_THROWS_MATCHES(
      conv2d(put({5, 5, 3}), w, o), ShapeError,
      Message("[conv2d] x f32[5,5,3] [unsharded,unsharded,unsharded] must be [n,h,w,c] and the "
              "filter f32[3,3,3,4] [unsharded,unsharded,unsharded,unsharded] [kh,kw,c/groups,o]"));
  // The fused form: a bias of the output channels in x's dtype.
  CHECK_THROWS_MATCHES(
      conv2d(x, w, put({3}), DenseActivation::kRelu, o), ShapeError,
      Message("[conv2d] the bias f32[3] [unsharded] must be f32[4] for x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] and the filter f32[3,3,3,4] "
              "[unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(
      conv2d(x, w, put({4}, DType::kF64), DenseActivation::kRelu, o), DTypeError,
      Message("[conv2d] the bias f64[4] [unsharded] must be f32[4] for x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] and the filter f32[3,3,3,4] "
              "[unsharded,unsharded,unsharded,unsharded]"));
  Conv2dOptions stride0;
  stride0.strides = {1, 0};
  CHECK_THROWS_MATCHES(conv2d(x, w, stride0), InvalidArgumentError,
                       Message("[conv2d] strides must be >= 1, got 1x0"));
  Conv2dOptions dilation0;
  dilation0.dilations = {0, 1};
  CHECK_THROWS_MATCHES(conv2d(x, w, dilation0), InvalidArgumentError,
                       Message("[conv2d] dilations must be >= 1, got 0x1"));
  Conv2dOptions groups2;
  groups2.groups = 2;
  CHECK_THROWS_MATCHES(
      conv2d(x, w, groups2), InvalidArgumentError,
      Message("[conv2d] groups 2 must be >= 1 and divide the input channels of x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] and the output channels of the filter "
              "f32[3,3,3,4] [unsharded,unsharded,unsharded,unsharded]"));
  Conv2dOptions groups0;
  groups0.groups = 0;
  CHECK_THROWS_MATCHES(
      conv2d(x, w, groups0), InvalidArgumentError,
      Message("[conv2d] groups 0 must be >= 1 and divide the input channels of x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] and the output channels of the filter "
              "f32[3,3,3,4] [unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(
      conv2d(put({2, 5, 5, 4}), put({3, 3, 2, 3}), groups2), InvalidArgumentError,
      Message("[conv2d] groups 2 must be >= 1 and divide the input channels of x f32[2,5,5,4] "
              "[unsharded,unsharded,unsharded,unsharded] and the output channels of the filter "
              "f32[3,3,2,3] [unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(
      conv2d(x, put({7, 3, 3, 4}), o), ShapeError,
      Message("[conv2d] the 7x3 filter (dilations 1x1) does not fit x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] padded to 5x5"));
  Conv2dOptions dilated;
  dilated.dilations = {3, 1};
  CHECK_THROWS_MATCHES(
      conv2d(x, w, dilated), ShapeError,
      Message("[conv2d] the 3x3 filter (dilations 3x1) does not fit x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] padded to 5x5"));
  Conv2dOptions negative;
  negative.padding = {Padding2d::kExplicit, 0, -1, 0, 0};
  CHECK_THROWS_MATCHES(conv2d(x, w, negative), InvalidArgumentError,
                       Message("[conv2d] explicit paddings must be >= 0, got 0,-1,0,0"));
  CHECK_THROWS_MATCHES(
      conv2d(x, put({3, 3, 3, 4}, DType::kF64), o), DTypeError,
      Message("[conv2d] dtypes differ: f32[2,5,5,3] [unsharded,unsharded,unsharded,unsharded] and "
              "f64[3,3,3,4] [unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(conv2d(put({2, 5, 5, 3}, DType::kI32), put({3, 3, 3, 4}, DType::kI32), o),
                       DTypeError,
                       Message("[conv2d] i32[2,5,5,3] [unsharded,unsharded,unsharded,unsharded] "
                               "must be f32, f64 or bf16"));
  CHECK_THROWS_MATCHES(
      conv2d_backprop_input({2, 5, 5, 3}, w, put({2, 4, 3, 4}), o), ShapeError,
      Message("[conv2d_backprop_input] dy f32[2,4,3,4] [unsharded,unsharded,unsharded,unsharded] "
              "must be [2,3,3,4], the output shape of the convolution"));
  CHECK_THROWS_MATCHES(
      conv2d_backprop_filter(x, {3, 3, 3, 4}, put({2, 3, 3, 5}), o), ShapeError,
      Message("[conv2d_backprop_filter] dy f32[2,3,3,5] [unsharded,unsharded,unsharded,unsharded] "
              "must be [2,3,3,4], the output shape of the convolution"));
  CHECK_THROWS_MATCHES(
      conv2d_backprop_filter(x, {3, 3, 3}, put({2, 3, 3, 4}), o), ShapeError,
      Message("[conv2d_backprop_filter] x f32[2,5,5,3] [unsharded,unsharded,unsharded,unsharded] "
              "must be [n,h,w,c] and the filter [3,3,3] [kh,kw,c/groups,o]"));

  Pool2dOptions big;
  big.window = {6, 2};
  CHECK_THROWS_MATCHES(max_pool2d(x, big), ShapeError,
                       Message("[max_pool2d] the 6x2 window does not fit x f32[2,5,5,3] "
                               "[unsharded,unsharded,unsharded,unsharded] padded to 5x5"));
  CHECK_THROWS_MATCHES(
      avg_pool2d(put({2, 5, 5}), {}), ShapeError,
      Message("[avg_pool2d] x f32[2,5,5] [unsharded,unsharded,unsharded] must be [n,h,w,c]"));
  Pool2dOptions pool_stride0;
  pool_stride0.strides = {0, 2};
  CHECK_THROWS_MATCHES(avg_pool2d(x, pool_stride0), InvalidArgumentError,
                       Message("[avg_pool2d] strides must be >= 1, got 0x2"));
  Pool2dOptions window0;
  window0.window = {2, 0};
  CHECK_THROWS_MATCHES(max_pool2d(x, window0), InvalidArgumentError,
                       Message("[max_pool2d] window must be >= 1, got 2x0"));
  Pool2dOptions wide_pad;
  wide_pad.padding = {Padding2d::kExplicit, 0, 2, 0, 0};
  CHECK_THROWS_MATCHES(max_pool2d(x, wide_pad), InvalidArgumentError,
                       Message("[max_pool2d] explicit paddings must be >= 0 and smaller than the "
                               "2x2 window, got 0,2,0,0"));

  CHECK_THROWS_MATCHES(local_response_normalization(put({2, 5, 3})), ShapeError,
                       Message("[local_response_normalization] x f32[2,5,3] "
                               "[unsharded,unsharded,unsharded] must be [n,h,w,c]"));
  CHECK_THROWS_MATCHES(local_response_normalization(x, -1), InvalidArgumentError,
                       Message("[local_response_normalization] depth_radius must be >= 0, got -1"));
  CHECK_THROWS_MATCHES(
      bias_add(x, put({4})), ShapeError,
      Message("[bias_add] the bias f32[4] [unsharded] must be [c] for x f32[2,5,5,3] "
              "[unsharded,unsharded,unsharded,unsharded] (c its last dim)"));
  CHECK_THROWS_MATCHES(bias_add(x, put({3}, DType::kF64)), DTypeError,
                       Message("[bias_add] dtypes differ: f32[2,5,5,3] "
                               "[unsharded,unsharded,unsharded,unsharded] and f64[3] [unsharded]"));
  CHECK_THROWS_MATCHES(flatten(put({})), ShapeError,
                       Message("[flatten] x f32[] [] must have rank >= 1"));
  CHECK_THROWS_MATCHES(dropout(x, 1.0, 1), InvalidArgumentError,
                       Message("[dropout] rate must be in [0, 1), got 1 for x f32[2,5,5,3] "
                               "[unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(dropout(x, -0.1, 1), InvalidArgumentError,
                       Message("[dropout] rate must be in [0, 1), got -0.1 for x f32[2,5,5,3] "
                               "[unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(dropout(x, std::nan(""), 1), InvalidArgumentError,
                       Message("[dropout] rate must be in [0, 1), got nan for x f32[2,5,5,3] "
                               "[unsharded,unsharded,unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(dropout(put({3}, DType::kI32), 0.5, 1), DTypeError,
                       Message("[dropout] i32[3] [unsharded] must be f32, f64 or bf16"));
}
