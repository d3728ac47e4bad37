// Optimizers against scalar references written from the tf.keras update rules, learning-rate
// schedules, layout independence (replicated, sharded and partial gradients and variables give the
// same bits as one device), slots, step counting and the errors bad input gets.
#include "train/optim/optimizers.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::distribute_with_terms;
using dtensor::testing::global_values;
using dtensor::testing::integer_tensor;

namespace {

Mesh one_device() { return Mesh::create({{"x", 1}}, DeviceType::kCPU); }
Mesh grid22() { return Mesh::create({{"x", 2}, {"y", 2}}, DeviceType::kCPU); }

Tensor tensor_of(const Shape& shape, DType dtype, const std::function<double(int64_t)>& value) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(value(i));
    } else {
      t.data<double>()[i] = value(i);
    }
  }
  return t;
}

// Initial weights and the gradient of step t (1-based), element i: smooth, signed, distinct.
double initial_weight(int64_t i) { return 0.5 - 0.13 * static_cast<double>(i); }
double gradient_at(int64_t t, int64_t i) {
  return std::sin(0.7 * static_cast<double>(i + 1) + 1.3 * static_cast<double>(t)) *
         (1.0 + 0.25 * static_cast<double>(t));
}

// One element's optimizer state in the reference.
struct Scalar {
  double w = 0, m = 0, v = 0;
};

// tf.keras (Keras 2.11+ / Keras 3) update rules, one element at a time. `t` counts from 1.
using Rule = std::function<void(Scalar& s, double g, double lr, int64_t t)>;

Rule keras_sgd(double momentum, bool nesterov) {
  return [=](Scalar& s, double g, double lr, int64_t) {
    if (momentum == 0) {
      s.w -= lr * g;
      return;
    }
    s.m = momentum * s.m - lr * g;  // the "momentum" slot
    s.w += nesterov ? momentum * s.m - lr * g : s.m;
  };
}

Rule keras_adam(double beta1, double beta2, double epsilon, double weight_decay = 0) {
  return [=](Scalar& s, double g, double lr, int64_t t) {
    s.w -= s.w * weight_decay * lr;  // AdamW: decoupled decay first, with the raw learning rate
    const double alpha = lr * std::sqrt(1 - std::pow(beta2, static_cast<double>(t))) /
                         (1 - std::pow(beta1, static_cast<double>(t)));
    s.m += (g - s.m) * (1 - beta1);
    s.v += (g * g - s.v) * (1 - beta2);
    s.w -= alpha * s.m / (std::sqrt(s.v) + epsilon);
  };
}

struct Case {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(Schedule)> make;
  Rule rule;
  std::vector<std::string> slot_names;  // as slots() reports them for variable "w"
};

std::vector<Case> cases(double epsilon) {
  return {
      {"SGD", [](Schedule lr) { return std::make_unique<SGD>(lr); }, keras_sgd(0, false), {}},
      {"SGD momentum",
       [](Schedule lr) { return std::make_unique<SGD>(lr, 0.9); },
       keras_sgd(0.9, false),
       {"w/momentum"}},
      {"SGD Nesterov",
       [](Schedule lr) { return std::make_unique<SGD>(lr, 0.8, true); },
       keras_sgd(0.8, true),
       {"w/momentum"}},
      {"Adam",
       [=](Schedule lr) { return std::make_unique<Adam>(lr, 0.9, 0.99, epsilon); },
       keras_adam(0.9, 0.99, epsilon),
       {"w/m", "w/v"}},
      {"AdamW",
       [=](Schedule lr) { return std::make_unique<AdamW>(lr, 0.1, 0.85, 0.995, epsilon); },
       keras_adam(0.85, 0.995, epsilon, 0.1),
       {"w/m", "w/v"}},
  };
}

// Runs `steps` applies of `opt` on a [3,4] variable and checks the variable after each against
// the reference, within `rel` relative error.
void check_against_reference(const Case& c, DType dtype, double rel, int64_t steps = 6) {
  INFO(c.name << " " << dtype_name(dtype));
  const Shape shape{3, 4};
  const int64_t n = num_elements(shape);
  Mesh mesh = one_device();
  Layout layout = Layout::replicated(mesh, 2);
  Schedule lr = exponential_decay(0.1, 2, 0.5, false);
  std::unique_ptr<Optimizer> opt = c.make(lr);
  DVariable w(distribute(tensor_of(shape, dtype, initial_weight), layout), "w");
  std::vector<Scalar> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref[static_cast<size_t>(i)].w = initial_weight(i);
  for (int64_t t = 1; t <= steps; ++t) {
    INFO("step " << t);
    DTensor grad =
        distribute(tensor_of(shape, dtype, [&](int64_t i) { return gradient_at(t, i); }), layout);
    opt->apply({w}, {grad});
    for (int64_t i = 0; i < n; ++i) {
      c.rule(ref[static_cast<size_t>(i)], gradient_at(t, i), lr(t - 1), t);
    }
    std::vector<double> got = global_values(w.value());
    for (int64_t i = 0; i < n; ++i) {
      INFO("element " << i);
      CHECK(got[static_cast<size_t>(i)] ==
            Approx(ref[static_cast<size_t>(i)].w).epsilon(rel).margin(rel));
    }
  }
  CHECK(opt->step() == steps);
  // The slots hold the reference's moments.
  auto slots = opt->slots();
  REQUIRE(slots.size() == c.slot_names.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    std::vector<double> got = global_values(slots[s].second.value());
    for (int64_t i = 0; i < n; ++i) {
      const Scalar& r = ref[static_cast<size_t>(i)];
      CHECK(got[static_cast<size_t>(i)] == Approx(s == 0 ? r.m : r.v).epsilon(rel).margin(rel));
    }
  }
}

DTensor run_steps(Optimizer& opt, const DVariable& w, const Mesh& mesh, const Layout& grad_layout,
                  int64_t steps) {
  for (int64_t t = 1; t <= steps; ++t) {
    // Integer-valued gradients: partial terms reduce to them exactly.
    Tensor g = integer_tensor(w.shape(), w.dtype(), 100 + static_cast<uint64_t>(t));
    opt.apply({w}, {distribute_with_terms(g, grad_layout.with_mesh(mesh), 7 * t)});
  }
  return w.value();
}

}  // namespace

TEST_CASE("optimizers match the tf.keras update rules (f64)") {
  // epsilon 0: the tf.keras rule and the Adam paper's Algorithm 1 agree exactly there (see the
  // epsilon test below).
  for (const Case& c : cases(0.0)) check_against_reference(c, DType::kF64, 1e-12);
}

TEST_CASE("optimizers match the tf.keras update rules (f32, default epsilon)") {
  for (const Case& c : cases(1e-7)) check_against_reference(c, DType::kF32, 2e-6);
}

// tf.keras documents Adam's epsilon as the paper's "epsilon hat": it is added to sqrt(v) as is,
// not scaled by sqrt(1 - beta2^t) (Algorithm 1's epsilon). A large epsilon shows the difference.
TEST_CASE("Adam adds epsilon to sqrt(v) unscaled, as tf.keras does") {
  for (const Case& c : cases(0.5)) {
    if (c.name == "Adam" || c.name == "AdamW") check_against_reference(c, DType::kF64, 1e-12, 3);
  }
}

TEST_CASE("learning-rate schedules") {
  Schedule c = constant_lr(0.25);
  for (int64_t step : {0, 1, 17, 100000}) CHECK(c(step) == 0.25);

  Schedule smooth = exponential_decay(0.1, 10, 0.5, false);
  Schedule stairs = exponential_decay(0.1, 10, 0.5, true);
  CHECK(smooth(0) == Approx(0.1).epsilon(1e-15));
  CHECK(smooth(5) == Approx(0.1 * std::sqrt(0.5)).epsilon(1e-15));
  CHECK(smooth(10) == Approx(0.05).epsilon(1e-15));
  CHECK(smooth(25) == Approx(0.1 * std::pow(0.5, 2.5)).epsilon(1e-15));
  CHECK(stairs(0) == Approx(0.1).epsilon(1e-15));
  CHECK(stairs(9) == Approx(0.1).epsilon(1e-15));
  CHECK(stairs(10) == Approx(0.05).epsilon(1e-15));
  CHECK(stairs(19) == Approx(0.05).epsilon(1e-15));
  CHECK(stairs(25) == Approx(0.025).epsilon(1e-15));

  Schedule cos0 = cosine_decay(0.1, 100);
  CHECK(cos0(0) == Approx(0.1).epsilon(1e-15));
  CHECK(cos0(50) == Approx(0.05).epsilon(1e-15));
  CHECK(cos0(25) == Approx(0.1 * 0.5 * (1 + std::cos(M_PI / 4))).epsilon(1e-15));
  CHECK(cos0(100) == Approx(0.0).margin(1e-17));
  Schedule cos_alpha = cosine_decay(0.1, 100, 0.2);
  CHECK(cos_alpha(50) == Approx(0.1 * (0.8 * 0.5 + 0.2)).epsilon(1e-15));
  CHECK(cos_alpha(100) == Approx(0.02).epsilon(1e-15));
  CHECK(cos_alpha(1000) == Approx(0.02).epsilon(1e-15));  // held at alpha after decay_steps

  CHECK_THROWS_MATCHES(exponential_decay(0.1, 0, 0.5, false), InvalidArgumentError,
                       Message("[exponential_decay] decay_steps must be >= 1, got 0"));
  CHECK_THROWS_MATCHES(cosine_decay(0.1, -3), InvalidArgumentError,
                       Message("[cosine_decay] decay_steps must be >= 1, got -3"));
}

TEST_CASE("the schedule is read at the step before the apply") {
  // lr(step) = step + 1 for plain SGD with unit gradients: w drops by 1, 2, 3, ...
  Mesh mesh = one_device();
  SGD opt([](int64_t step) { return static_cast<double>(step + 1); });
  DVariable w(zeros({2}, Layout::replicated(mesh, 1), DType::kF64), "w");
  DTensor g = ones({2}, Layout::replicated(mesh, 1), DType::kF64);
  std::vector<double> expected{-1, -3, -6, -10};
  for (double e : expected) {
    opt.apply({w}, {g});
    CHECK(global_values(w.value()) == std::vector<double>{e, e});
  }
}

TEST_CASE("the same gradients in any layout give bit-identical variables") {
  const Shape shape{5, 3};  // uneven over x=2 and y=2
  Mesh one = one_device();
  Mesh mesh = grid22();
  using U = std::string;
  const U un = Layout::kUnsharded;
  std::vector<Layout> var_layouts = {
      Layout::replicated(mesh, 2),
      Layout::batch_sharded(mesh, "x", 2),  // a batch-sharded weight
      Layout({"y", "x"}, mesh),
      Layout({un, "y"}, mesh),
  };
  std::vector<Layout> grad_layouts = {
      Layout::replicated(mesh, 2),
      Layout({"x", un}, mesh),
      Layout({un, un}, mesh, {{"x", ReduceOp::kSum}}),
      Layout({un, "x"}, mesh, {{"y", ReduceOp::kSum}}),
      Layout({un, un}, mesh, {{"x", ReduceOp::kSum}, {"y", ReduceOp::kSum}}),
  };
  std::vector<std::function<std::unique_ptr<Optimizer>()>> makers = {
      [] { return std::make_unique<SGD>(0.01); },
      [] { return std::make_unique<SGD>(0.01, 0.9); },
      [] { return std::make_unique<SGD>(0.01, 0.9, true); },
      [] { return std::make_unique<Adam>(0.01); },
      [] { return std::make_unique<AdamW>(cosine_decay(0.01, 5), 0.05); },
  };
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor init = tensor_of(shape, dtype, initial_weight);
    for (size_t o = 0; o < makers.size(); ++o) {
      std::unique_ptr<Optimizer> ref_opt = makers[o]();
      DVariable ref_w(distribute(init, Layout::replicated(one, 2)), "w");
      Tensor expected = to_global(run_steps(*ref_opt, ref_w, one, Layout::replicated(one, 2), 3));
      auto ref_slots = ref_opt->slots();
      for (const Layout& vl : var_layouts) {
        for (const Layout& gl : grad_layouts) {
          INFO("optimizer " << o << " " << dtype_name(dtype) << " variable " << vl.short_string()
                            << " gradient " << gl.short_string());
          std::unique_ptr<Optimizer> opt = makers[o]();
          DVariable w(distribute(init, vl), "w");
          DTensor got = run_steps(*opt, w, mesh, gl, 3);
          CHECK(got.layout() == vl);
          CHECK(bitwise_equal(to_global(got), expected));
          auto slots = opt->slots();
          REQUIRE(slots.size() == ref_slots.size());
          for (size_t s = 0; s < slots.size(); ++s) {
            CHECK(slots[s].first == ref_slots[s].first);
            CHECK(slots[s].second.layout() == vl);
            CHECK(bitwise_equal(to_global(slots[s].second.value()),
                                to_global(ref_slots[s].second.value())));
          }
        }
      }
    }
  }
}

TEST_CASE("slots: created on first apply, named after the variable, in its layout") {
  Mesh mesh = grid22();
  Layout la = Layout::batch_sharded(mesh, "x", 2);
  Layout lb = Layout::replicated(mesh, 1);
  DVariable a(zeros({4, 2}, la), "dense/kernel");
  DVariable b(zeros({2}, lb), "dense/bias");
  std::vector<DTensor> grads = {ones({4, 2}, la), ones({2}, lb)};

  SGD plain(0.1);
  plain.apply({a, b}, grads);
  CHECK(plain.slots().empty());

  SGD momentum(0.1, 0.5);
  CHECK(momentum.slots().empty());
  momentum.apply({a, b}, grads);
  auto ms = momentum.slots();
  REQUIRE(ms.size() == 2);
  CHECK(ms[0].first == "dense/kernel/momentum");
  CHECK(ms[0].second.layout() == la);
  CHECK(ms[1].first == "dense/bias/momentum");
  CHECK(ms[1].second.layout() == lb);

  Adam adam(0.1);
  CHECK(adam.slots().empty());
  adam.apply({a, b}, grads);
  auto as = adam.slots();
  REQUIRE(as.size() == 4);
  std::vector<std::string> names;
  for (const auto& [name, slot] : as) {
    names.push_back(name);
    CHECK(slot.name() == name);
    CHECK(slot.dtype() == DType::kF32);
  }
  CHECK(names == std::vector<std::string>{"dense/kernel/m", "dense/kernel/v", "dense/bias/m",
                                          "dense/bias/v"});
  CHECK(as[0].second.layout() == la);
  CHECK(as[1].second.shape() == Shape{4, 2});
  CHECK(as[3].second.layout() == lb);
  // Applying again reuses the slots.
  adam.apply({a, b}, grads);
  CHECK(adam.slots().size() == 4);
  CHECK(adam.slots()[0].second.id() == as[0].second.id());
}

TEST_CASE("step counting") {
  Mesh mesh = one_device();
  Layout l = Layout::replicated(mesh, 1);
  DVariable w(zeros({3}, l, DType::kF64), "w");
  DTensor g = ones({3}, l, DType::kF64);
  Adam adam(0.1);
  CHECK(adam.step() == 0);
  for (int64_t i = 1; i <= 4; ++i) {
    adam.apply({w}, {g});
    CHECK(adam.step() == i);
  }
  adam.apply({}, {});  // no variables: still one step, as Keras counts iterations
  CHECK(adam.step() == 5);

  SECTION("set_step moves the schedule and the bias correction") {
    // A fresh Adam at step 9 does what the reference does at t = 10 from zero moments.
    Adam resumed(exponential_decay(0.1, 3, 0.5, true), 0.9, 0.99, 0.0);
    resumed.set_step(9);
    DVariable v(fill({3}, l, 2.0, DType::kF64), "v");
    resumed.apply({v}, {g});
    CHECK(resumed.step() == 10);
    Scalar s{2.0, 0, 0};
    keras_adam(0.9, 0.99, 0.0)(s, 1.0, 0.1 * std::pow(0.5, 3), 10);
    CHECK(global_values(v.value())[0] == Approx(s.w).epsilon(1e-14));
  }
}

TEST_CASE("optimizer errors") {
  Mesh mesh = one_device();
  Layout l2 = Layout::replicated(mesh, 2);
  DVariable w(zeros({2, 3}, l2), "w");
  DVariable b(zeros({3}, Layout::replicated(mesh, 1)), "b");
  SGD sgd(0.1);
  Adam adam(0.1);
  AdamW adamw(constant_lr(0.1), 0.01);

  CHECK_THROWS_MATCHES(sgd.apply({w, b}, {zeros({2, 3}, l2)}), InvalidArgumentError,
                       Message("[SGD::apply] got 1 gradients for 2 variables"));
  CHECK_THROWS_MATCHES(adam.apply({w}, {}), InvalidArgumentError,
                       Message("[Adam::apply] got 0 gradients for 1 variables"));
  CHECK_THROWS_MATCHES(
      adamw.apply({w}, {zeros({3, 2}, l2)}), ShapeError,
      Message("[AdamW::apply] gradient f32[3,2] [unsharded,unsharded] does not match variable "
              "'w' f32[2,3] [unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(
      sgd.apply({w}, {zeros({2, 3}, l2, DType::kF64)}), ShapeError,
      Message("[SGD::apply] gradient f64[2,3] [unsharded,unsharded] does not match variable "
              "'w' f32[2,3] [unsharded,unsharded]"));
  Mesh other = grid22();
  CHECK_THROWS_MATCHES(
      adam.apply({w}, {zeros({2, 3}, Layout::batch_sharded(other, "x", 2))}), ShapeError,
      Message("[Adam::apply] gradient f32[2,3] [x,unsharded] does not match variable 'w' "
              "f32[2,3] [unsharded,unsharded]"));
  DVariable counter(zeros({2}, Layout::replicated(mesh, 1), DType::kI32), "counter");
  CHECK_THROWS_MATCHES(
      sgd.apply({counter}, {zeros({2}, Layout::replicated(mesh, 1), DType::kI32)}), DTypeError,
      Message("[SGD::apply] variable 'counter' is i32; f32 and f64 are supported"));
  // Rejected applies count no step.
  CHECK(sgd.step() == 0);
  CHECK(adam.step() == 0);
  CHECK(adamw.step() == 0);

  CHECK_THROWS_MATCHES(SGD(0.1, 1.5), InvalidArgumentError,
                       Message("[SGD] momentum must be in [0, 1], got 1.5"));
  CHECK_THROWS_MATCHES(SGD(0.1, -0.1), InvalidArgumentError,
                       Message("[SGD] momentum must be in [0, 1], got -0.1"));
  CHECK_THROWS_MATCHES(Adam(0.1, 1.0), InvalidArgumentError,
                       Message("[Adam] need 0 <= beta1, beta2 < 1 and epsilon >= 0, got 1, "
                               "0.999, 1e-07"));
  CHECK_THROWS_MATCHES(Adam(0.1, 0.9, 0.999, -1.0), InvalidArgumentError,
                       Message("[Adam] need 0 <= beta1, beta2 < 1 and epsilon >= 0, got 0.9, "
                               "0.999, -1"));
  CHECK_THROWS_MATCHES(AdamW(constant_lr(0.1), 0.01, 0.9, 1.5), InvalidArgumentError,
                       Message("[AdamW] need 0 <= beta1, beta2 < 1 and epsilon >= 0, got 0.9, "
                               "1.5, 1e-07"));
}

// Regression: apply() used to check each pair as it went, so a bad second gradient was found after
// the first variable had been updated. No user error may corrupt state.
TEST_CASE("a rejected apply changes no variable, slot or step") {
  Mesh mesh = one_device();
  Layout l = Layout::replicated(mesh, 1);
  DVariable a(zeros({3}, l), "a");
  DVariable b(zeros({3}, l), "b");
  Adam adam(0.1);
  CHECK_THROWS_AS(adam.apply({a, b}, {ones({3}, l), ones({4}, l)}), ShapeError);
  CHECK(adam.step() == 0);
  CHECK(global_values(a.value()) == std::vector<double>{0, 0, 0});
  CHECK(adam.slots().empty());
}
