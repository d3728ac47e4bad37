// Spatially sharded conv2d and pooling (halo exchange, ops/halo_window.h) against one device:
// random meshes {8}, {2,4}, {2,2,2}, random batch/H/W/channel layouts with uneven and empty
// shards, filters 1x1..5x5, strides 1-3, dilations, SAME/VALID/explicit padding, groups; the
// gradients through the tape; and the collectives: one halo exchange per sharded spatial dim per
// direction, none for batch sharding.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::standard_meshes;
using dtensor::testing::test_mesh;

namespace {

using Rng = std::mt19937_64;

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Tensor uniform(const Shape& shape, Rng& rng, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::uniform_real_distribution<float> u(static_cast<float>(lo), static_cast<float>(hi));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  Tensor g = kernels::cast(got, DType::kF64), w = kernels::cast(want, DType::kF64);
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    const double a = g.data<double>()[i], b = w.data<double>()[i];
    INFO("element " << i << ": got " << a << ", want " << b);
    REQUIRE(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)));
  }
}

Layout pick(Rng& rng, const std::vector<Layout>& layouts) {
  return layouts[static_cast<size_t>(
      uniform_int(rng, 0, static_cast<int64_t>(layouts.size()) - 1))];
}

// Rank-4 layouts of `mesh` with H or W sharded (batch and channels anything).
std::vector<Layout> spatial_layouts(const Mesh& mesh) {
  std::vector<Layout> out;
  for (const Layout& l : all_layouts(mesh, 4, false)) {
    if (l.is_sharded(1) || l.is_sharded(2)) out.push_back(l);
  }
  return out;
}

Padding2d random_padding(Rng& rng, int64_t max_explicit) {
  switch (uniform_int(rng, 0, 2)) {
    case 0:
      return {Padding2d::kValid};
    case 1:
      return {Padding2d::kSame};
    default:
      return {Padding2d::kExplicit, uniform_int(rng, 0, max_explicit),
              uniform_int(rng, 0, max_explicit), uniform_int(rng, 0, max_explicit),
              uniform_int(rng, 0, max_explicit)};
  }
}

std::string describe(const Padding2d& p) {
  switch (p.kind) {
    case Padding2d::kValid:
      return "VALID";
    case Padding2d::kSame:
      return "SAME";
    case Padding2d::kExplicit:
      return fmt::format("explicit {},{},{},{}", p.top, p.bottom, p.left, p.right);
  }
  return "?";
}

// The value and the gradients of loss = sum(f(inputs) * r) with the inputs in `layouts`.
struct Result {
  Tensor y;
  std::vector<Tensor> grads;
};
Result run(const std::function<DTensor(const std::vector<DTensor>&)>& f,
           const std::vector<Tensor>& inputs, const std::vector<Layout>& layouts, const Tensor& r) {
  std::vector<DTensor> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(distribute(inputs[i], layouts[i]));
  GradientTape tape;
  for (const DTensor& d : in) tape.watch(d);
  DTensor y = f(in);
  DTensor loss = reduce_sum(mul(y, distribute(r, Layout::replicated(y.mesh(), y.rank()))));
  Result out{to_global(y), {}};
  for (const DTensor& g : tape.gradient(loss, in)) out.grads.push_back(to_global(g));
  return out;
}

// f on spatially sharded inputs against f on replicated ones (the single-device computation),
// value and gradients.
void check_against_one_device(const std::function<DTensor(const std::vector<DTensor>&)>& f,
                              const std::vector<Tensor>& inputs, const std::vector<Layout>& layouts,
                              Rng& rng, const std::string& what) {
  const Mesh& mesh = layouts[0].mesh();
  std::vector<Layout> replicated;
  for (const Tensor& t : inputs) replicated.push_back(Layout::replicated(mesh, t.rank()));
  std::vector<DTensor> probe;
  for (size_t i = 0; i < inputs.size(); ++i) probe.push_back(distribute(inputs[i], replicated[i]));
  const Tensor r = uniform(f(probe).shape(), rng, -1, 1);
  const Result want = run(f, inputs, replicated, r);
  const Result got = run(f, inputs, layouts, r);
  check_close(got.y, want.y, what + ": value");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_close(got.grads[i], want.grads[i], what + ": gradient " + std::to_string(i));
  }
}

}  // namespace

TEST_CASE("conv2d on spatial layouts equals one device, value and gradients") {
  Rng rng(2024);
  const std::vector<Mesh> meshes = standard_meshes();
  for (int t = 0; t < 90; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t % 3)];
    const int64_t groups = uniform_int(rng, 0, 3) == 0 ? 2 : 1;
    const Shape x_shape{uniform_int(rng, 1, 3), uniform_int(rng, 1, 13), uniform_int(rng, 1, 13),
                        groups * uniform_int(rng, 1, 2)};
    const Shape w_shape{uniform_int(rng, 1, 5), uniform_int(rng, 1, 5), x_shape[3] / groups,
                        groups * uniform_int(rng, 1, 2)};
    Conv2dOptions options;
    options.strides = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3)};
    options.dilations = {uniform_int(rng, 1, 2), uniform_int(rng, 1, 2)};
    options.padding = random_padding(rng, 3);
    options.groups = groups;
    const Layout x_layout = pick(rng, spatial_layouts(mesh));
    const Layout w_layout = pick(rng, all_layouts(mesh, 4, false));
    const std::string what = fmt::format(
        "x {} {} w {} {} on {} strides {}x{} dilations {}x{} {} groups {}",
        shape_to_string(x_shape), x_layout.short_string(), shape_to_string(w_shape),
        w_layout.short_string(), mesh.dims_string(), options.strides[0], options.strides[1],
        options.dilations[0], options.dilations[1], describe(options.padding), groups);
    INFO(what);
    const Tensor x = uniform(x_shape, rng, -1, 1);
    const Tensor w = uniform(w_shape, rng, -1, 1);
    auto f = [options](const std::vector<DTensor>& v) { return conv2d(v[0], v[1], options); };
    try {
      f({distribute(x, Layout::replicated(mesh, 4)), distribute(w, Layout::replicated(mesh, 4))});
    } catch (const ShapeError&) {
      continue;  // the window does not fit: not a spatial case
    }
    check_against_one_device(f, {x, w}, {x_layout, w_layout}, rng, what);
  }
}

TEST_CASE("conv2d gradients on spatial layouts equal one device's") {
  // The two gradient ops on their own, with dy spatially sharded (backprop_input) and x and dy
  // sharded differently (backprop_filter).
  Rng rng(7);
  const std::vector<Mesh> meshes = standard_meshes();
  for (int t = 0; t < 45; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t % 3)];
    const Shape x_shape{uniform_int(rng, 1, 3), uniform_int(rng, 3, 13), uniform_int(rng, 3, 13),
                        uniform_int(rng, 1, 3)};
    const Shape w_shape{uniform_int(rng, 1, 3), uniform_int(rng, 1, 3), x_shape[3],
                        uniform_int(rng, 1, 3)};
    Conv2dOptions options;
    options.strides = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3)};
    options.padding = random_padding(rng, 2);
    DTensor probe =
        conv2d(distribute(uniform(x_shape, rng, -1, 1), Layout::replicated(mesh, 4)),
               distribute(uniform(w_shape, rng, -1, 1), Layout::replicated(mesh, 4)), options);
    const Shape y_shape = probe.shape();
    const std::string what = fmt::format(
        "x {} w {} on {} strides {}x{} {}", shape_to_string(x_shape), shape_to_string(w_shape),
        mesh.dims_string(), options.strides[0], options.strides[1], describe(options.padding));
    INFO(what);
    const Tensor x = uniform(x_shape, rng, -1, 1);
    const Tensor w = uniform(w_shape, rng, -1, 1);
    const Tensor dy = uniform(y_shape, rng, -1, 1);
    check_against_one_device(
        [&](const std::vector<DTensor>& v) {
          return conv2d_backprop_input(x_shape, v[0], v[1], options);
        },
        {w, dy}, {pick(rng, all_layouts(mesh, 4, false)), pick(rng, spatial_layouts(mesh))}, rng,
        what + " backprop_input");
    check_against_one_device(
        [&](const std::vector<DTensor>& v) {
          return conv2d_backprop_filter(v[0], w_shape, v[1], options);
        },
        {x, dy}, {pick(rng, spatial_layouts(mesh)), pick(rng, spatial_layouts(mesh))}, rng,
        what + " backprop_filter");
  }
}

TEST_CASE("max_pool2d and avg_pool2d on spatial layouts equal one device, value and gradients") {
  Rng rng(99);
  const std::vector<Mesh> meshes = standard_meshes();
  for (int t = 0; t < 90; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(t % 3)];
    const bool max = t % 2 == 0;
    const Shape x_shape{uniform_int(rng, 1, 3), uniform_int(rng, 1, 13), uniform_int(rng, 1, 13),
                        uniform_int(rng, 1, 3)};
    Pool2dOptions options;
    options.window = {uniform_int(rng, 1, 4), uniform_int(rng, 1, 4)};
    options.strides = {uniform_int(rng, 1, 3), uniform_int(rng, 1, 3)};
    options.padding = random_padding(rng, 3);
    if (options.padding.kind == Padding2d::kExplicit) {
      options.padding.top %= options.window[0], options.padding.bottom %= options.window[0];
      options.padding.left %= options.window[1], options.padding.right %= options.window[1];
    }
    const Layout x_layout = pick(rng, spatial_layouts(mesh));
    const std::string what = fmt::format(
        "{} x {} {} on {} window {}x{} strides {}x{} {}", max ? "max" : "avg",
        shape_to_string(x_shape), x_layout.short_string(), mesh.dims_string(), options.window[0],
        options.window[1], options.strides[0], options.strides[1], describe(options.padding));
    INFO(what);
    const Tensor x = uniform(x_shape, rng, -1, 1);
    auto f = [options, max](const std::vector<DTensor>& v) {
      return max ? max_pool2d(v[0], options) : avg_pool2d(v[0], options);
    };
    try {
      f({distribute(x, Layout::replicated(mesh, 4))});
    } catch (const ShapeError&) {
      continue;
    }
    check_against_one_device(f, {x}, {x_layout}, rng, what);
  }
}

TEST_CASE("uneven and empty spatial shards: H=13 over 4, H=5 over 8") {
  Rng rng(5);
  struct Case {
    Mesh mesh;
    Layout layout;
    Shape x_shape;
  };
  const Mesh m8 = test_mesh({{"batch", 8}});
  const Mesh m24 = test_mesh({{"x", 2}, {"y", 4}});
  const Mesh m222 = test_mesh({{"a", 2}, {"b", 2}, {"c", 2}});
  const std::vector<Case> cases = {
      {m24, Layout({"unsharded", "y", "unsharded", "unsharded"}, m24), {2, 13, 6, 3}},
      {m8, Layout({"unsharded", "batch", "unsharded", "unsharded"}, m8), {2, 5, 4, 2}},
      {m8, Layout({"unsharded", "unsharded", "batch", "unsharded"}, m8), {1, 3, 5, 2}},
      {m24, Layout({"x", "y", "unsharded", "unsharded"}, m24), {3, 13, 7, 2}},
      {m24, Layout({"unsharded", "x", "y", "unsharded"}, m24), {2, 7, 13, 2}},
      {m222, Layout({"a", "b", "c", "unsharded"}, m222), {3, 5, 3, 2}},
      {m222, Layout({"unsharded", "c", "a", "b"}, m222), {2, 9, 6, 4}},
  };
  for (const Case& c : cases) {
    for (int64_t k = 1; k <= 5; k += 2) {
      for (int64_t stride = 1; stride <= 3; ++stride) {
        for (Padding2d::Kind kind : {Padding2d::kSame, Padding2d::kValid}) {
          Conv2dOptions options;
          options.strides = {stride, stride};
          options.padding = {kind};
          const Shape w_shape{k, k, c.x_shape[3], 2};
          const std::string what =
              fmt::format("x {} {} on {} filter {}x{} stride {} {}", shape_to_string(c.x_shape),
                          c.layout.short_string(), c.mesh.dims_string(), k, k, stride,
                          describe(options.padding));
          INFO(what);
          const Tensor x = uniform(c.x_shape, rng, -1, 1);
          const Tensor w = uniform(w_shape, rng, -1, 1);
          auto f = [options](const std::vector<DTensor>& v) { return conv2d(v[0], v[1], options); };
          try {
            f({distribute(x, Layout::replicated(c.mesh, 4)),
               distribute(w, Layout::replicated(c.mesh, 4))});
          } catch (const ShapeError&) {
            continue;
          }
          check_against_one_device(f, {x, w}, {c.layout, Layout::replicated(c.mesh, 4)}, rng, what);
          Pool2dOptions pool;
          pool.window = {k, k};
          pool.strides = {stride, stride};
          pool.padding = {kind};
          check_against_one_device(
              [pool](const std::vector<DTensor>& v) { return max_pool2d(v[0], pool); }, {x},
              {c.layout}, rng, what + " max_pool2d");
          check_against_one_device(
              [pool](const std::vector<DTensor>& v) { return avg_pool2d(v[0], pool); }, {x},
              {c.layout}, rng, what + " avg_pool2d");
        }
      }
    }
  }
}

TEST_CASE("max_pool2d's gradient on spatial layouts routes ties like one device") {
  // Values in {0, 1, 2}: most windows have several maxima, and each shard's extended window must
  // pick the same first one as the whole tensor does.
  const Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  Rng rng(8);
  Tensor x = Tensor::empty({2, 11, 10, 2}, DType::kF32);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    x.data<float>()[i] = static_cast<float>(uniform_int(rng, 0, 2));
  }
  for (int64_t k = 2; k <= 4; ++k) {
    for (int64_t stride = 1; stride <= 2; ++stride) {
      Pool2dOptions pool;
      pool.window = {k, k};
      pool.strides = {stride, stride};
      pool.padding = {Padding2d::kSame};
      const std::string what = fmt::format("window {} stride {}", k, stride);
      check_against_one_device(
          [pool](const std::vector<DTensor>& v) { return max_pool2d(v[0], pool); }, {x},
          {Layout({"unsharded", "y", "x", "unsharded"}, mesh)}, rng, what);
    }
  }
}

TEST_CASE("f64 conv2d and pooling on spatial layouts equal one device") {
  const Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  Rng rng(64);
  const Tensor x = kernels::cast(uniform({2, 11, 9, 3}, rng, -1, 1), DType::kF64);
  const Tensor w = kernels::cast(uniform({3, 2, 3, 2}, rng, -1, 1), DType::kF64);
  Conv2dOptions conv;
  conv.strides = {2, 1};
  conv.dilations = {1, 2};
  conv.padding = {Padding2d::kSame};
  Pool2dOptions pool;
  pool.window = {3, 3};
  pool.strides = {2, 2};
  pool.padding = {Padding2d::kSame};
  const Layout layout({"unsharded", "y", "x", "unsharded"}, mesh);
  const Layout replicated = Layout::replicated(mesh, 4);
  const std::vector<std::pair<const char*, std::function<DTensor(const DTensor&)>>> ops = {
      {"conv2d", [&](const DTensor& v) { return conv2d(v, distribute(w, replicated), conv); }},
      {"max_pool2d", [&](const DTensor& v) { return max_pool2d(v, pool); }},
      {"avg_pool2d", [&](const DTensor& v) { return avg_pool2d(v, pool); }},
  };
  for (const auto& [name, op] : ops) {
    const DTensor y = op(distribute(x, layout));
    REQUIRE(y.dtype() == DType::kF64);
    REQUIRE(y.layout().sharding_specs() == layout.sharding_specs());
    check_close(to_global(y), to_global(op(distribute(x, replicated))), name);
  }
}

namespace {

// The collectives of f's forward pass and of its backward pass (the gradients in the layouts
// the expansion gives: the filter gradient stays a partial sum).
std::pair<CollectiveStats, CollectiveStats> count(
    const std::function<DTensor(const std::vector<DTensor>&)>& f, const std::vector<DTensor>& in) {
  GradientTape tape;
  for (const DTensor& d : in) tape.watch(d);
  reset_collective_stats();
  DTensor y = f(in);
  const CollectiveStats forward = collective_stats();
  reset_collective_stats();
  tape.gradient(y, in);
  return {forward, collective_stats()};
}

}  // namespace

TEST_CASE("one halo exchange per sharded spatial dim per direction, none for batch sharding") {
  const Mesh mesh = test_mesh({{"a", 2}, {"b", 2}, {"c", 2}});
  Rng rng(1);
  const Tensor x = uniform({4, 12, 10, 3}, rng, -1, 1);
  const Tensor w = uniform({3, 3, 3, 4}, rng, -1, 1);
  Conv2dOptions conv;
  conv.padding = {Padding2d::kSame};
  Pool2dOptions pool;
  pool.window = {3, 3};
  pool.strides = {2, 2};
  pool.padding = {Padding2d::kSame};
  const DTensor wd = distribute(w, Layout::replicated(mesh, 4));
  const std::vector<std::pair<std::vector<std::string>, int64_t>> layouts = {
      {{"a", "unsharded", "unsharded", "unsharded"}, 0},
      {{"a", "unsharded", "unsharded", "b"}, 0},
      {{"a", "b", "unsharded", "unsharded"}, 1},
      {{"unsharded", "unsharded", "c", "unsharded"}, 1},
      {{"a", "b", "c", "unsharded"}, 2},
      {{"unsharded", "b", "a", "unsharded"}, 2},
  };
  for (const auto& [specs, exchanges] : layouts) {
    const Layout layout(specs, mesh);
    INFO(layout.short_string());
    const DTensor xd = distribute(x, layout);
    const bool channels = layout.is_sharded(3);
    {
      auto [forward, backward] =
          count([&](const std::vector<DTensor>& v) { return conv2d(v[0], v[1], conv); }, {xd, wd});
      INFO("conv2d forward " << forward.to_string() << " backward " << backward.to_string());
      REQUIRE(forward.count(CollectiveKind::kAllToAll) == exchanges);
      REQUIRE(backward.count(CollectiveKind::kAllToAll) == exchanges);
      if (!channels) {
        // Only the exchanges (a channel-sharded x first brings w's channels to it).
        REQUIRE(forward.total() == exchanges);
        REQUIRE(backward.total() == exchanges);
      }
    }
    for (bool max : {true, false}) {
      auto [forward, backward] = count(
          [&](const std::vector<DTensor>& v) {
            return max ? max_pool2d(v[0], pool) : avg_pool2d(v[0], pool);
          },
          {xd});
      INFO((max ? "max" : "avg") << "_pool2d forward " << forward.to_string() << " backward "
                                 << backward.to_string());
      REQUIRE(forward.total() == exchanges);
      REQUIRE(forward.count(CollectiveKind::kAllToAll) == exchanges);
      REQUIRE(backward.total() == exchanges);
      REQUIRE(backward.count(CollectiveKind::kAllToAll) == exchanges);
    }
  }
}

TEST_CASE("LRN, bias_add and dropout keep spatial layouts without communication") {
  const Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  Rng rng(3);
  const Tensor x = uniform({2, 9, 7, 4}, rng, -1, 1);
  const Tensor b = uniform({4}, rng, -1, 1);
  for (const auto& specs :
       std::vector<std::vector<std::string>>{{"unsharded", "x", "y", "unsharded"},
                                             {"x", "y", "unsharded", "unsharded"},
                                             {"unsharded", "unsharded", "y", "unsharded"}}) {
    const Layout layout(specs, mesh);
    INFO(layout.short_string());
    const DTensor xd = distribute(x, layout);
    const DTensor xr = distribute(x, Layout::replicated(mesh, 4));
    const DTensor bd = distribute(b, Layout::replicated(mesh, 1));
    const std::vector<std::pair<const char*, std::function<DTensor(const DTensor&)>>> ops = {
        {"local_response_normalization",
         [](const DTensor& v) { return local_response_normalization(v, 4, 1.0, 0.001 / 9, 0.75); }},
        {"bias_add", [&](const DTensor& v) { return bias_add(v, bd); }},
        {"dropout", [](const DTensor& v) { return dropout(v, 0.3, 11); }},
    };
    for (const auto& [name, op] : ops) {
      INFO(name);
      reset_collective_stats();
      const DTensor y = op(xd);
      REQUIRE(collective_stats().total() == 0);
      REQUIRE(y.layout() == layout);
      check_close(to_global(y), to_global(op(xr)), name);
    }
  }
}
