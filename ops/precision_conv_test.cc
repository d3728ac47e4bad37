// conv2d under mixed_bfloat16 (ops/precision.h): f32 results and gradients from bf16 convolutions
// with f32 accumulation, against an f64 reference of the same bf16-rounded operands, and on
// batch-sharded and spatially sharded (halo) meshes against one device. Tolerance: each output
// of the three convolutions sums products of exact bf16 values in f32, so it lies within
// 2^-11 * sum |a * b| of the f64 value (kernels/cpu/bf16_conv_test.cc states the bound); the
// sums of |a * b| are the same convolutions of |a| and |b| in f64.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "dtensor/creation.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "tests/test_tensors.h"

using namespace dtensor;

namespace {

constexpr double kF32SumBound = 1.0 / 2048;

Tensor values(const Shape& shape, uint64_t seed) { return testing::uniform_f32(shape, seed); }

Tensor f64(const Tensor& t) { return kernels::cast(t, DType::kF64); }
Tensor bf16_rounded(const Tensor& t) { return kernels::cast(t, DType::kBF16); }
Tensor abs64(const Tensor& t) { return kernels::unary(kernels::UnaryOp::kAbs, f64(t)); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// y = conv2d(x, w) (SAME 5x5, explicit so that the kernel parameters below say the same), or
// with a bias b fused, and the gradients of loss = sum(y * r).
struct Run {
  Tensor y, dx, dw, db;
};

Conv2dOptions same_5x5() {
  Conv2dOptions o;
  o.padding = {Padding2d::kExplicit, 2, 2, 2, 2};
  return o;
}

kernels::Conv2dParams same_5x5_params() {
  kernels::Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 2;
  return p;
}

Run run(const Tensor& x, const Tensor& w, const Tensor& r, const Layout& x_layout,
        const Tensor* b = nullptr) {
  const Mesh& mesh = x_layout.mesh();
  const DTensor xd = distribute(x, x_layout);
  const DTensor wd = distribute(w, Layout::replicated(mesh, 4));
  std::vector<DTensor> sources{xd, wd};
  if (b) sources.push_back(distribute(*b, Layout::replicated(mesh, 1)));
  GradientTape tape;
  for (const DTensor& s : sources) tape.watch(s);
  const DTensor y = b ? conv2d(xd, wd, sources[2], DenseActivation::kNone, same_5x5())
                      : conv2d(xd, wd, same_5x5());
  const DTensor loss = reduce_sum(mul(y, distribute(r, Layout::replicated(mesh, 4))));
  const std::vector<DTensor> g = tape.gradient(loss, sources);
  return {to_global(y), to_global(g[0]), to_global(g[1]), b ? to_global(g[2]) : Tensor()};
}

// got within kF32SumBound * bound of exact, elementwise.
void require_within(const std::string& what, const Tensor& got, const Tensor& exact,
                    const Tensor& bound) {
  REQUIRE(got.dtype() == DType::kF32);
  REQUIRE(got.shape() == exact.shape());
  const Tensor g = f64(got);
  for (int64_t i = 0; i < exact.num_elements(); ++i) {
    INFO(what << " element " << i << ": " << g.data<double>()[i] << " vs "
              << exact.data<double>()[i]);
    REQUIRE(std::abs(g.data<double>()[i] - exact.data<double>()[i]) <=
            kF32SumBound * bound.data<double>()[i]);
  }
}

Layout layout_of(const Mesh& mesh, std::vector<std::string> specs) {
  return Layout(std::move(specs), mesh);
}

}  // namespace

TEST_CASE("mixed conv2d: f32 value and gradients of bf16 convolutions, on any layout",
          "[precision]") {
  const Tensor x = values({4, 12, 12, 8}, 1), w = values({5, 5, 8, 16}, 2);
  const Tensor r = values({4, 12, 12, 16}, 3);
  // The f64 reference of the bf16 operands (r is the upstream gradient, cast to bf16 once).
  const Tensor x16 = bf16_rounded(x), w16 = bf16_rounded(w), r16 = bf16_rounded(r);
  const kernels::Conv2dParams p = same_5x5_params();
  const Tensor y_exact = kernels::conv2d(f64(x16), f64(w16), p);
  const Tensor y_bound = kernels::conv2d(abs64(x16), abs64(w16), p);
  const Tensor dx_exact = kernels::conv2d_backprop_input(x.shape(), f64(w16), f64(r16), p);
  const Tensor dx_bound = kernels::conv2d_backprop_input(x.shape(), abs64(w16), abs64(r16), p);
  const Tensor dw_exact = kernels::conv2d_backprop_filter(f64(x16), w.shape(), f64(r16), p);
  const Tensor dw_bound = kernels::conv2d_backprop_filter(abs64(x16), w.shape(), abs64(r16), p);

  PolicyScope mixed(Policy::mixed_bfloat16());
  const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  const Run want = run(x, w, r, Layout::replicated(one, 4));
  require_within("y", want.y, y_exact, y_bound);
  require_within("dx", want.dx, dx_exact, dx_bound);
  require_within("dw", want.dw, dw_exact, dw_bound);

  // Batch-sharded: each device convolves its own images, and the filter gradient's sum over the
  // batch is batch-invariant (ops/expand.h): one device's bits.
  const Mesh four = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  const Run batch = run(x, w, r, Layout::batch_sharded(four, "batch", 4));
  CHECK(same_bits(batch.y, want.y));
  CHECK(same_bits(batch.dx, want.dx));
  CHECK(same_bits(batch.dw, want.dw));

  // Spatially sharded (halo exchange), alone and with the batch: each output position sums the
  // same products in the same order, so y and dx are one device's bits; the filter gradient's
  // partial sums over H and W are added in another order, within the bound.
  const Mesh hw = Mesh::create({{"h", 2}, {"w", 2}}, DeviceType::kCPU);
  const Mesh bh = Mesh::create({{"batch", 2}, {"h", 2}}, DeviceType::kCPU);
  for (const Layout& l : {layout_of(hw, {"unsharded", "h", "w", "unsharded"}),
                          layout_of(bh, {"batch", "h", "unsharded", "unsharded"})}) {
    INFO("x " << l.to_string());
    const Run halo = run(x, w, r, l);
    CHECK(same_bits(halo.y, want.y));
    CHECK(same_bits(halo.dx, want.dx));
    require_within("dw", halo.dw, dw_exact, dw_bound);
  }
}

TEST_CASE("mixed conv2d with a fused bias: the bias added to the f32 accumulator", "[precision]") {
  const Tensor x = values({4, 12, 12, 8}, 1), w = values({5, 5, 8, 16}, 2);
  const Tensor r = values({4, 12, 12, 16}, 3), b = values({16}, 6);
  PolicyScope mixed(Policy::mixed_bfloat16());
  const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  const Run plain = run(x, w, r, Layout::replicated(one, 4));
  const Run fused = run(x, w, r, Layout::replicated(one, 4), &b);
  // y + b within the bound of y plus |b| (one more f32 rounding); the bias gradient sums r over
  // n, h and w in f32.
  const Tensor x16 = bf16_rounded(x), w16 = bf16_rounded(w);
  const kernels::Conv2dParams p = same_5x5_params();
  const Tensor add_b = f64(b);
  require_within(
      "y + b", fused.y,
      kernels::binary(kernels::BinaryOp::kAdd, kernels::conv2d(f64(x16), f64(w16), p), add_b),
      kernels::binary(kernels::BinaryOp::kAdd, kernels::conv2d(abs64(x16), abs64(w16), p),
                      abs64(b)));
  CHECK(same_bits(fused.dx, plain.dx));
  CHECK(same_bits(fused.dw, plain.dw));
  REQUIRE(fused.db.dtype() == DType::kF32);
  const Tensor db_exact = kernels::reduce(kernels::ReduceKind::kSum, f64(r), {0, 1, 2}, false);
  const Tensor db_bound = kernels::reduce(kernels::ReduceKind::kSum, abs64(r), {0, 1, 2}, false);
  require_within("db", fused.db, db_exact, db_bound);
  // Batch-sharded: one device's bits, the bias gradient included (a batch-invariant sum).
  const Mesh four = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  const Run batch = run(x, w, r, Layout::batch_sharded(four, "batch", 4), &b);
  CHECK(same_bits(batch.y, fused.y));
  CHECK(same_bits(batch.dx, fused.dx));
  CHECK(same_bits(batch.dw, fused.dw));
  CHECK(same_bits(batch.db, fused.db));
}

TEST_CASE("mixed conv2d names the caller's f32 operands in its errors", "[precision]") {
  const Mesh mesh = Mesh::create({{"batch", 2}}, DeviceType::kCPU);
  const DTensor x = distribute(values({2, 5, 5, 3}, 4), Layout::batch_sharded(mesh, "batch", 4));
  const DTensor w = distribute(values({3, 3, 4, 8}, 5), Layout::replicated(mesh, 4));
  PolicyScope mixed(Policy::mixed_bfloat16());
  CHECK_THROWS_MATCHES(
      conv2d(x, w), ShapeError,
      Catch::Message("[conv2d] x f32[2,5,5,3] [batch,unsharded,unsharded,unsharded] has 3 channels "
                     "but the filter f32[3,3,4,8] [unsharded,unsharded,unsharded,unsharded] "
                     "expects 4 per group x 1 groups = 4"));
}
