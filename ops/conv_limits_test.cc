// Degenerate and extreme CNN geometry (issue 25): filters with a zero dim (zero output channels
// with groups used to divide by zero in the spatially sharded input gradient), empty pooling
// inputs, and paddings, dilations, strides and windows near 2^62 and 2^63 (their output-size
// arithmetic used to overflow int64). Each bad input gets its exact error; each boundary value
// that fits runs and gives the values the definition says. Run under --config=asan (with UBSan)
// to show that no step overflows.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "kernels/conv_params.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::test_mesh;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t k2to62 = int64_t{1} << 62;

// 1, 2, 3, ... in f32 (exact), in `shape`.
Tensor ramp(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i + 1);
  return t;
}

std::vector<float> values(const DTensor& x) {
  const Tensor t = to_global(x);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

Conv2dOptions explicit_padding(int64_t top, int64_t bottom, int64_t left, int64_t right) {
  Conv2dOptions o;
  o.padding = {Padding2d::kExplicit, top, bottom, left, right};
  return o;
}

}  // namespace

TEST_CASE("regression: grouped conv2d with zero output channels is an error, not SIGFPE") {
  // mesh h=2 x c=2; dy's H sharded sent conv2d_backprop_input down the halo path, which divided
  // the local output channels by o / groups = 0.
  const Mesh mesh = test_mesh({{"h", 2}, {"c", 2}});
  const Layout h_sharded({"unsharded", "h", "unsharded", "unsharded"}, mesh);
  Conv2dOptions groups2;
  groups2.groups = 2;
  const DTensor w =
      distribute(Tensor::zeros({3, 3, 2, 0}, DType::kF32), Layout::replicated(mesh, 4));
  const DTensor dy = distribute(Tensor::zeros({2, 4, 4, 0}, DType::kF32), h_sharded);
  CHECK_THROWS_MATCHES(
      conv2d_backprop_input({2, 6, 6, 4}, w, dy, groups2), ShapeError,
      Message("[conv2d_backprop_input] the filter f32[3,3,2,0] "
              "[unsharded,unsharded,unsharded,unsharded] must have at least one tap and one "
              "channel in and out per group (kh, kw, c/groups and o >= 1); x [2,6,6,4] has 4 "
              "channels in 2 groups, dy f32[2,4,4,0] [unsharded,h,unsharded,unsharded]"));
  // The forward op refuses the filter, so no tape ever reaches that gradient.
  const DTensor x = distribute(ramp({2, 6, 6, 4}), h_sharded);
  CHECK_THROWS_MATCHES(
      conv2d(x, w, groups2), ShapeError,
      Message("[conv2d] the filter f32[3,3,2,0] [unsharded,unsharded,unsharded,unsharded] must "
              "have at least one tap and one channel in and out per group (kh, kw, c/groups and "
              "o >= 1); x f32[2,6,6,4] [unsharded,h,unsharded,unsharded] has 4 channels in 2 "
              "groups"));
  CHECK_THROWS_MATCHES(
      conv2d_backprop_filter(x, {3, 3, 2, 0}, dy, groups2), ShapeError,
      Message("[conv2d_backprop_filter] the filter [3,3,2,0] must have at least one tap and one "
              "channel in and out per group (kh, kw, c/groups and o >= 1); x f32[2,6,6,4] "
              "[unsharded,h,unsharded,unsharded] has 4 channels in 2 groups, dy f32[2,4,4,0] "
              "[unsharded,h,unsharded,unsharded]"));
}

TEST_CASE("regression: every zero channel, tap and group count is an exact error") {
  const Mesh mesh = test_mesh({{"h", 2}, {"c", 2}});
  const std::vector<Layout> layouts = {
      Layout::replicated(mesh, 4),
      Layout({"unsharded", "h", "unsharded", "unsharded"}, mesh),
      Layout({"unsharded", "unsharded", "h", "c"}, mesh),
      Layout({"c", "h", "unsharded", "unsharded"}, mesh),
  };
  struct Case {
    int64_t groups, c;
    Shape w;
  };
  // Zero output channels, zero input channels (per group and in all), zero taps; groups 1, 2, 4.
  const std::vector<Case> cases = {
      {1, 4, {3, 3, 4, 0}}, {2, 4, {3, 3, 2, 0}}, {4, 4, {3, 3, 1, 0}},
      {1, 0, {3, 3, 0, 4}}, {2, 0, {3, 3, 0, 4}}, {2, 0, {3, 3, 0, 0}},
      {1, 4, {0, 3, 4, 4}}, {2, 4, {3, 0, 2, 4}}, {4, 0, {0, 0, 0, 0}},
  };
  for (const Layout& layout : layouts) {
    for (const Case& k : cases) {
      INFO("layout " << layout.short_string() << ", groups " << k.groups << ", filter "
                     << shape_to_string(k.w));
      Conv2dOptions o;
      o.groups = k.groups;
      const DTensor x = distribute(Tensor::zeros({2, 6, 6, k.c}, DType::kF32), layout);
      const DTensor w = distribute(Tensor::zeros(k.w, DType::kF32), Layout::replicated(mesh, 4));
      const Shape dy_shape = {2, 4, 4, k.w[3]};
      const DTensor dy = distribute(Tensor::zeros(dy_shape, DType::kF32), layout);
      const std::string tail = "must have at least one tap and one channel in and out per group";
      CHECK_THROWS_WITH(conv2d(x, w, o),
                        Catch::StartsWith("[conv2d] the filter ") && Catch::Contains(tail));
      CHECK_THROWS_WITH(conv2d_backprop_input(x.shape(), w, dy, o),
                        Catch::StartsWith("[conv2d_backprop_input] the filter ") &&
                            Catch::Contains(tail) && Catch::Contains(dy.short_string()));
      CHECK_THROWS_WITH(conv2d_backprop_filter(x, k.w, dy, o),
                        Catch::StartsWith("[conv2d_backprop_filter] the filter ") &&
                            Catch::Contains(tail) && Catch::Contains(x.short_string()));
      CHECK_THROWS_AS(conv2d(x, w, o), ShapeError);
    }
  }
  // A groups count whose product with the filter's channels overflows is a mismatch.
  Conv2dOptions huge_groups;
  huge_groups.groups = k2to62;
  CHECK_THROWS_MATCHES(
      conv2d_backprop_filter(
          distribute(Tensor::zeros({1, 3, 3, 0}, DType::kF32), layouts[0]), {1, 1, 4, k2to62},
          distribute(Tensor::zeros({1, 3, 3, 0}, DType::kF32), layouts[0]), huge_groups),
      ShapeError,
      Message("[conv2d_backprop_filter] x f32[1,3,3,0] [unsharded,unsharded,unsharded,unsharded] "
              "has 0 channels but the filter [1,1,4,4611686018427387904] expects 4 per group x "
              "4611686018427387904 groups = more than int64 holds"));
}

TEST_CASE("regression: empty pooling inputs give empty outputs and gradients on every layout") {
  const Mesh mesh = test_mesh({{"h", 2}, {"c", 2}});
  const std::vector<Layout> layouts = {Layout::replicated(mesh, 4),
                                       Layout({"unsharded", "h", "unsharded", "unsharded"}, mesh),
                                       Layout({"unsharded", "h", "unsharded", "c"}, mesh),
                                       Layout({"c", "unsharded", "h", "unsharded"}, mesh)};
  for (const Layout& layout : layouts) {
    for (const Shape& shape : {Shape{2, 6, 6, 0}, Shape{0, 6, 6, 3}}) {
      INFO("layout " << layout.short_string() << ", x " << shape_to_string(shape));
      const DTensor x = distribute(Tensor::zeros(shape, DType::kF32), layout);
      Pool2dOptions o;
      const Shape want = {shape[0], 3, 3, shape[3]};
      GradientTape tape;
      tape.watch(x);
      const DTensor y = add(max_pool2d(x, o), avg_pool2d(x, o));
      CHECK(y.shape() == want);
      const std::vector<DTensor> dx = tape.gradient(reduce_sum(y), {x});
      CHECK(dx[0].shape() == shape);
    }
  }
}

TEST_CASE("regression: the checked output-size arithmetic at int64's boundary") {
  using kernels::conv_output_size;
  using kernels::kOutputSizeOverflow;
  int64_t out = 0;
  CHECK(kernels::padded_size(5, k2to62, k2to62 - 6, &out));
  CHECK(out == kMax);
  CHECK_FALSE(kernels::padded_size(5, k2to62, k2to62 - 5, &out));
  CHECK(kernels::window_span(3, k2to62 - 1, &out));
  CHECK(out == kMax);
  CHECK_FALSE(kernels::window_span(3, k2to62, &out));
  CHECK_FALSE(kernels::window_span(std::numeric_limits<int64_t>::min(), 1, &out));
  CHECK(conv_output_size(5, k2to62, k2to62 - 6, 3, 1, k2to62) == 2);
  CHECK(conv_output_size(5, k2to62, k2to62 - 5, 3, 1, k2to62) == kOutputSizeOverflow);
  CHECK(conv_output_size(5, 0, 0, 3, k2to62, 1) == kOutputSizeOverflow);
  CHECK(conv_output_size(5, 0, 0, kMax, 1, 1) == 0);
  CHECK(conv_output_size(kMax, 0, 0, 1, 1, kMax) == 1);
  CHECK(conv_output_size(kMax, 0, 0, kMax, 1, 1) == 1);
  CHECK(conv_output_size(5, 0, 0, 3, 1, 0) == 0);
}

TEST_CASE("regression: conv2d paddings, dilations and strides near 2^62 run or throw exactly") {
  const Mesh mesh = test_mesh({{"h", 2}, {"c", 2}});
  const std::vector<Layout> layouts = {Layout::replicated(mesh, 4),
                                       Layout({"unsharded", "h", "unsharded", "unsharded"}, mesh),
                                       Layout({"unsharded", "h", "c", "unsharded"}, mesh)};
  const Tensor xg = ramp({1, 5, 5, 1});
  const Tensor wg = ramp({3, 3, 1, 1});
  for (const Layout& layout : layouts) {
    INFO("layout " << layout.short_string());
    const DTensor x = distribute(xg, layout);
    const DTensor w = distribute(wg, Layout::replicated(mesh, 4));
    const std::string xs = x.short_string(), ws = w.short_string();

    // Padded height exactly INT64_MAX, stride 2^62: two output rows, the second over x's rows
    // 0..2 (the first VALID row), the first all padding.
    Conv2dOptions edge = explicit_padding(k2to62, k2to62 - 6, 0, 0);
    edge.strides = {k2to62, 1};
    const DTensor y = conv2d(x, w, edge);
    REQUIRE(y.shape() == Shape{1, 2, 3, 1});
    const std::vector<float> valid = values(conv2d(x, w));
    CHECK(values(y) == std::vector<float>{0, 0, 0, valid[0], valid[1], valid[2]});
    // Its gradients run through the same geometry (and the halo exchange when H is sharded).
    GradientTape tape;
    tape.watch(x);
    tape.watch(w);
    const std::vector<DTensor> grads = tape.gradient(reduce_sum(conv2d(x, w, edge)), {x, w});
    CHECK(grads[0].shape() == xg.shape());
    CHECK(grads[1].shape() == wg.shape());
    // dw[i][j] = sum of the rows 0..2 window of x at tap (i, j).
    CHECK(values(grads[1])[0] == 1 + 2 + 3);

    // One more row of padding no longer fits in int64.
    Conv2dOptions over = explicit_padding(k2to62, k2to62 - 5, 0, 0);
    over.strides = {k2to62, 1};
    CHECK_THROWS_MATCHES(conv2d(x, w, over), InvalidArgumentError,
                         Message("[conv2d] x " + xs +
                                 " with padding 4611686018427387904,4611686018427387899,0,0 "
                                 "or the 3x3 filter " +
                                 ws + " with dilations 1x1 is larger than int64 holds"));
    CHECK_THROWS_AS(
        conv2d_backprop_input(xg.shape(), w,
                              distribute(Tensor::zeros({1, 2, 3, 1}, DType::kF32), layout), over),
        InvalidArgumentError);

    // Dilation 2^61 with 3 taps spans 2^62 + 1 rows; top padding 2^62: only the last tap lands
    // in x, on the output's own row, so y[r, c] = sum_j x[r, c + j] * w[2, j].
    Conv2dOptions dilated = explicit_padding(k2to62, 0, 0, 0);
    dilated.dilations = {int64_t{1} << 61, 1};
    const std::vector<float> yd = values(conv2d(x, w, dilated));
    REQUIRE(yd.size() == 15);
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t c = 0; c < 3; ++c) {
        float want = 0;
        for (int64_t j = 0; j < 3; ++j) {
          want += xg.data<float>()[r * 5 + c + j] * wg.data<float>()[2 * 3 + j];
        }
        CHECK(yd[static_cast<size_t>(r * 3 + c)] == want);
      }
    }
    Conv2dOptions too_dilated;
    too_dilated.dilations = {k2to62, 1};
    CHECK_THROWS_MATCHES(
        conv2d(x, w, too_dilated), InvalidArgumentError,
        Message("[conv2d] x " + xs + " with padding VALID or the 3x3 filter " + ws +
                " with dilations 4611686018427387904x1 is larger than int64 "
                "holds"));
    Conv2dOptions same_dilated;
    same_dilated.padding.kind = Padding2d::kSame;
    same_dilated.dilations = {k2to62, 1};
    CHECK_THROWS_MATCHES(conv2d(x, w, same_dilated), InvalidArgumentError,
                         Message("[conv2d] x " + xs + " with padding SAME or the 3x3 filter " + ws +
                                 " with dilations 4611686018427387904x1 is larger than int64 "
                                 "holds"));
    // SAME with the largest stride is SAME with stride 5 here: one output, the centre window
    // (SAME's ceil(in / stride) used to overflow computing in + stride - 1).
    Conv2dOptions same_max, same_5;
    same_max.padding.kind = same_5.padding.kind = Padding2d::kSame;
    same_max.strides = {kMax, kMax};
    same_5.strides = {5, 5};
    CHECK(values(conv2d(x, w, same_max)) == values(conv2d(x, w, same_5)));
  }
}

TEST_CASE("regression: pooling windows and paddings near 2^62 run or throw exactly") {
  const Mesh mesh = test_mesh({{"h", 2}, {"c", 2}});
  const std::vector<Layout> layouts = {Layout::replicated(mesh, 4),
                                       Layout({"unsharded", "h", "unsharded", "unsharded"}, mesh),
                                       Layout({"unsharded", "h", "c", "unsharded"}, mesh)};
  const Tensor xg = ramp({1, 5, 5, 1});
  for (const Layout& layout : layouts) {
    INFO("layout " << layout.short_string());
    const DTensor x = distribute(xg, layout);
    const std::string xs = x.short_string();

    // SAME windows of 2^62 x 2^62 cover all of x from every output position (the work estimate
    // used to multiply the two window sizes in int64).
    Pool2dOptions whole;
    whole.window = {k2to62, k2to62};
    whole.strides = {1, 1};
    whole.padding.kind = Padding2d::kSame;
    CHECK(values(max_pool2d(x, whole)) == std::vector<float>(25, 25.0f));
    CHECK(values(avg_pool2d(x, whole)) == std::vector<float>(25, 13.0f));
    GradientTape tape;
    tape.watch(x);
    const std::vector<DTensor> dx =
        tape.gradient(reduce_sum(add(max_pool2d(x, whole), avg_pool2d(x, whole))), {x});
    const std::vector<float> g = values(dx[0]);
    CHECK(g[24] == Approx(25.0 + 1.0));  // the maximum takes every window's max gradient
    CHECK(g[0] == Approx(1.0));          // 25 windows of 25 positions each

    // Explicit paddings below the window that add up to INT64_MAX: one window, x's row 0.
    Pool2dOptions edge;
    edge.window = {k2to62, 1};
    edge.strides = {k2to62, 1};
    edge.padding = {Padding2d::kExplicit, k2to62 - 1, k2to62 - 5, 0, 0};
    CHECK(values(max_pool2d(x, edge)) == std::vector<float>{1, 2, 3, 4, 5});
    edge.padding.bottom = k2to62 - 4;
    CHECK_THROWS_MATCHES(
        max_pool2d(x, edge), InvalidArgumentError,
        Message("[max_pool2d] x " + xs +
                " padded by 4611686018427387903,4611686018427387900,0,0 "
                "for the 4611686018427387904x1 window is larger than int64 holds"));
    // SAME with the largest window pads by about INT64_MAX in all.
    Pool2dOptions biggest;
    biggest.window = {kMax, 1};
    biggest.strides = {1, 1};
    biggest.padding.kind = Padding2d::kSame;
    CHECK_THROWS_MATCHES(
        avg_pool2d(x, biggest), InvalidArgumentError,
        Message("[avg_pool2d] x " + xs +
                " padded by 4611686018427387903,4611686018427387903,0,0 "
                "for the 9223372036854775807x1 window is larger than int64 holds"));
  }
}

TEST_CASE("regression: the CPU kernels check their own geometry for overflow") {
  kernels::Conv2dParams p;
  p.pad_top = k2to62;
  p.pad_bottom = k2to62;
  const Tensor x = Tensor::zeros({1, 5, 5, 1}, DType::kF32),
               w = Tensor::zeros({3, 3, 1, 1}, DType::kF32);
  CHECK_THROWS_MATCHES(kernels::conv2d(x, w, p), InvalidArgumentError,
                       Message("[conv2d] x [1,5,5,1] padded by 4611686018427387904,"
                               "4611686018427387904,0,0 or the 3x3 window dilated 1x1 is larger "
                               "than int64 holds"));
  kernels::Pool2dParams q;
  q.window_h = kMax;
  q.pad_top = kMax - 1;
  q.pad_bottom = 2;
  CHECK_THROWS_MATCHES(kernels::max_pool2d(x, q), InvalidArgumentError,
                       Message("[max_pool2d] x [1,5,5,1] padded by 9223372036854775806,2,0,0 is "
                               "larger than int64 holds"));
}
