// ExponentialMovingAverage: shadows against a direct formula (with and without the num_updates
// debiasing), the same values on one device and on {8} and {2,4} meshes in every layout, swapping
// the averages in and out, checkpoint round trips (into another mesh too) and the errors.
#include "train/optim/ema.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"
#include "train/checkpoint/checkpoint.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::global_values;

namespace {

// Variable values at step t (t = 0: the initial value), element i.
double value_at(int64_t t, int64_t i) {
  return 0.25 * static_cast<double>(i) - 1.0 + 0.5 * static_cast<double>((t * 5 + i * 3) % 7) -
         0.01 * static_cast<double>(t * t);
}

Tensor values(const Shape& shape, DType dtype, int64_t t) {
  Tensor x = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (dtype == DType::kF32) {
      x.data<float>()[i] = static_cast<float>(value_at(t, i));
    } else {
      x.data<double>()[i] = value_at(t, i);
    }
  }
  return x;
}

// `steps` rounds of (assign the step's value, apply) on a [5,3] variable in `layout`; returns the
// shadow's global values.
std::vector<double> run(const Layout& layout, DType dtype, int64_t steps, double decay = 0.9,
                        bool debias = true) {
  const Shape shape{5, 3};
  DVariable w(distribute(values(shape, dtype, 0), layout), "w");
  ExponentialMovingAverage ema(decay, debias);
  ema.track({w});
  for (int64_t t = 1; t <= steps; ++t) {
    w.assign(distribute(values(shape, dtype, t), layout));
    ema.apply({w});
  }
  CHECK(ema.num_updates() == steps);
  CHECK(ema.average(w).layout() == layout);
  return global_values(ema.average(w).value());
}

// The formula, element by element.
std::vector<double> reference(int64_t n, int64_t steps, double decay, bool debias) {
  std::vector<double> shadow(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) shadow[static_cast<size_t>(i)] = value_at(0, i);
  for (int64_t t = 1; t <= steps; ++t) {
    const double u = static_cast<double>(t - 1);
    const double d = debias ? std::min(decay, (1 + u) / (10 + u)) : decay;
    for (int64_t i = 0; i < n; ++i) {
      double& s = shadow[static_cast<size_t>(i)];
      s = d * s + (1 - d) * value_at(t, i);
    }
  }
  return shadow;
}

Mesh one_device() { return Mesh::create({{"x", 1}}, DeviceType::kCPU); }

std::string fresh_directory(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(root != nullptr ? root : "/tmp") + "/ema_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("EMA shadows follow the formula, with and without num_updates debiasing") {
  const Layout layout = Layout::replicated(one_device(), 2);
  for (bool debias : {true, false}) {
    for (double decay : {0.9, 0.5, 0.9999}) {
      INFO("debias " << debias << " decay " << decay);
      std::vector<double> want = reference(15, 30, decay, debias);
      std::vector<double> f64 = run(layout, DType::kF64, 30, decay, debias);
      std::vector<double> f32 = run(layout, DType::kF32, 30, decay, debias);
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK(f64[i] == Approx(want[i]).epsilon(1e-12).margin(1e-12));
        CHECK(f32[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
      }
    }
  }
}

TEST_CASE("EMA decay follows min(decay, (1 + n) / (10 + n))") {
  ExponentialMovingAverage ema(0.9999);
  CHECK(ema.current_decay() == Approx(0.1));
  ema.set_num_updates(8);
  CHECK(ema.current_decay() == Approx(0.5));
  ema.set_num_updates(1000000);
  CHECK(ema.current_decay() == 0.9999);
  ExponentialMovingAverage plain(0.99, /*debias=*/false);
  CHECK(plain.current_decay() == 0.99);
}

TEST_CASE("EMA gives the same bits on one device and on {8} and {2,4} meshes in every layout") {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    std::vector<double> want = run(Layout::replicated(one_device(), 2), dtype, 7);
    for (const Mesh& mesh : {Mesh::create({{"batch", 8}}, DeviceType::kCPU),
                             Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU)}) {
      for (const Layout& layout : all_layouts(mesh, 2, /*with_partial=*/false)) {
        INFO(layout.to_string());
        CHECK(run(layout, dtype, 7) == want);
      }
    }
  }
}

TEST_CASE("a replicated variable's shadow stays one shared buffer") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  DVariable w(distribute(values({4, 4}, DType::kF32, 0), Layout::replicated(mesh, 2)), "w");
  ExponentialMovingAverage ema(0.9);
  ema.apply({w});
  DTensor s = ema.average(w).value();
  for (size_t d = 1; d < s.shards().size(); ++d) CHECK(s.shard(d).is_same_as(s.shard(0)));
}

TEST_CASE("swap_in puts the averages into the variables and the training values back") {
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  const Layout layout({"x", "y"}, mesh);
  DVariable w(distribute(values({5, 3}, DType::kF64, 0), layout), "w");
  DVariable b(distribute(values({5, 3}, DType::kF64, 1), Layout::replicated(mesh, 2)), "b");
  ExponentialMovingAverage ema(0.5, false);
  ema.track({w, b});
  w.assign(distribute(values({5, 3}, DType::kF64, 1), layout));
  b.assign(distribute(values({5, 3}, DType::kF64, 3), Layout::replicated(mesh, 2)));
  ema.apply({w, b});
  const std::vector<double> trained_w = global_values(w.value());
  const std::vector<double> trained_b = global_values(b.value());
  {
    ExponentialMovingAverage::Swap swap = ema.swap_in({w, b});
    const std::vector<double> got = global_values(w.value());
    const std::vector<double> want = reference(15, 1, 0.5, false);
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
    CHECK(global_values(w.value()) == global_values(ema.average(w).value()));
    CHECK(global_values(b.value()) == global_values(ema.average(b).value()));
    CHECK(w.layout() == layout);
  }
  CHECK(global_values(w.value()) == trained_w);
  CHECK(global_values(b.value()) == trained_b);
  ExponentialMovingAverage::Swap early = ema.swap_in({w});
  early.restore();
  CHECK(global_values(w.value()) == trained_w);
}

TEST_CASE("EMA checkpoints round-trip, into another mesh too, and resume gives the same values") {
  const Shape shape{5, 3};
  const std::string dir = fresh_directory("roundtrip") + "/ckpt";
  // An uninterrupted run of 6 steps on {8}, row-sharded.
  Mesh eight = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  const Layout rows({"batch", "unsharded"}, eight);
  std::vector<double> uninterrupted = run(rows, DType::kF32, 6);
  // The same run, saved after 3 steps.
  {
    DVariable w(distribute(values(shape, DType::kF32, 0), rows), "w");
    ExponentialMovingAverage ema(0.9);
    ema.track({w});
    Checkpoint ckpt;
    ckpt.add_variable("w", w);
    ema.track_in(ckpt, "ema");
    for (int64_t t = 1; t <= 3; ++t) {
      w.assign(distribute(values(shape, DType::kF32, t), rows));
      ema.apply({w});
    }
    ckpt.save(dir);
  }
  // Restored into a {2,4} mesh with another layout: the same shadow and count, then 3 more steps.
  Mesh grid = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  const Layout cols({"y", "x"}, grid);
  DVariable w(distribute(values(shape, DType::kF32, 0), cols), "w");
  ExponentialMovingAverage ema(0.9);
  ema.track({w});
  Checkpoint ckpt;
  ckpt.add_variable("w", w);
  ema.track_in(ckpt, "ema");
  ckpt.restore(dir);
  CHECK(ema.num_updates() == 3);
  CHECK(ema.shadows().at(0).first == "w/ExponentialMovingAverage");
  CHECK(ema.average(w).layout() == cols);
  CHECK(global_values(ema.average(w).value()) == run(rows, DType::kF32, 3));
  for (int64_t t = 4; t <= 6; ++t) {
    w.assign(distribute(values(shape, DType::kF32, t), cols));
    ema.apply({w});
  }
  CHECK(global_values(ema.average(w).value()) == uninterrupted);
  // The shadow is an entry of its own, readable by name.
  CHECK(global_values(load_variable(dir, "ema/w/ExponentialMovingAverage",
                                    Layout::replicated(one_device(), 2))) ==
        run(rows, DType::kF32, 3));
}

TEST_CASE("EMA errors") {
  Mesh mesh = Mesh::create({{"x", 2}}, DeviceType::kCPU);
  CHECK_THROWS_MATCHES(ExponentialMovingAverage(1.5), InvalidArgumentError,
                       Message("[ExponentialMovingAverage] decay must be in [0, 1], got 1.5"));
  CHECK_THROWS_MATCHES(ExponentialMovingAverage(-0.1), InvalidArgumentError,
                       Message("[ExponentialMovingAverage] decay must be in [0, 1], got -0.1"));
  ExponentialMovingAverage ema(0.9);
  CHECK_THROWS_MATCHES(ema.set_num_updates(-2), InvalidArgumentError,
                       Message("[ExponentialMovingAverage::set_num_updates] num_updates must be "
                               ">= 0, got -2"));
  DVariable w(distribute(values({2, 2}, DType::kF32, 0), Layout::replicated(mesh, 2)), "w");
  Tensor ints = Tensor::empty({2}, DType::kI32);
  ints.data<int32_t>()[0] = 1;
  ints.data<int32_t>()[1] = 2;
  DVariable counter(distribute(ints, Layout::replicated(mesh, 1)), "counter");
  CHECK_THROWS_MATCHES(ema.average(w), InvalidArgumentError,
                       Message("[ExponentialMovingAverage::average] variable 'w' has no moving "
                               "average"));
  CHECK_THROWS_MATCHES(ema.swap_in({w}), InvalidArgumentError,
                       Message("[ExponentialMovingAverage::swap_in] variable 'w' has no moving "
                               "average"));
  CHECK_THROWS_MATCHES(ema.apply({w, counter}), DTypeError,
                       Message("[ExponentialMovingAverage::apply] variable 'counter' is i32; f32 "
                               "and f64 are supported"));
  // A rejected apply changes nothing.
  CHECK(ema.shadows().empty());
  CHECK(ema.num_updates() == 0);
  CHECK_THROWS_MATCHES(ema.track({counter}), DTypeError,
                       Message("[ExponentialMovingAverage::track] variable 'counter' is i32; f32 "
                               "and f64 are supported"));
}
