// Gradients: every op's VJP against central finite differences (f64, one device), sharded
// gradients against the single-device ones, and the data-parallel reduction count.
#include "ops/autograd.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/kernels/kernels.h"
#include "ops/ops.h"
#include "runtime/collectives.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::standard_meshes;

namespace {

using Fn = std::function<DTensor(const std::vector<DTensor>&)>;

Tensor random_f64(const Shape& shape, std::mt19937_64& rng, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = d(rng);
  return t;
}

// loss = sum(f(inputs) * weights), with fixed random weights so every output element matters.
double loss_of(const Fn& f, const std::vector<DTensor>& inputs, const DTensor& weights) {
  DTensor y = f(inputs);
  DTensor l = reduce_sum(mul(y, weights));
  return to_global(l).data<double>()[0];
}

void check_gradients(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs,
                     uint64_t seed = 1) {
  INFO(name);
  Mesh one = Mesh::create({{"d", 1}}, DeviceType::kCPU);
  std::vector<DTensor> x;
  for (const Tensor& t : inputs) x.push_back(distribute(t, Layout::replicated(one, t.rank())));
  std::mt19937_64 rng(seed);
  DTensor probe = f(x);
  DTensor weights =
      distribute(random_f64(probe.shape(), rng, -1, 1), Layout::replicated(one, probe.rank()));
  std::vector<DTensor> grads;
  {
    GradientTape tape;
    for (const DTensor& t : x) tape.watch(t);
    DTensor y = f(x);
    grads = tape.gradient(reduce_sum(mul(y, weights)), x);
  }
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != DType::kF64) continue;
    Tensor g = to_global(grads[i]);
    REQUIRE(g.shape() == inputs[i].shape());
    for (int64_t e = 0; e < inputs[i].num_elements(); ++e) {
      auto shifted = [&](double delta) {
        Tensor t = inputs[i].clone();
        t.data<double>()[e] += delta;
        std::vector<DTensor> xs = x;
        xs[i] = distribute(t, Layout::replicated(one, t.rank()));
        return loss_of(f, xs, weights);
      };
      double numeric = (shifted(h) - shifted(-h)) / (2 * h);
      INFO("input " << i << " element " << e);
      CHECK(g.data<double>()[e] == Approx(numeric).epsilon(1e-5).margin(1e-6));
    }
  }
}

}  // namespace

TEST_CASE("unary VJPs match finite differences") {
  std::mt19937_64 rng(1);
  const std::vector<std::pair<const char*, DTensor (*)(const DTensor&)>> ops = {
      {"neg", neg},
      {"abs", dtensor::abs},
      {"exp", dtensor::exp},
      {"log", dtensor::log},
      {"sqrt", dtensor::sqrt},
      {"rsqrt", rsqrt},
      {"square", square},
      {"relu", relu},
      {"sigmoid", sigmoid},
      {"tanh", dtensor::tanh},
      {"gelu", gelu}};
  for (const auto& [name, op] : ops) {
    Tensor x = random_f64({3, 4}, rng, 0.2, 2.0);
    if (std::string(name) != "log" && std::string(name) != "sqrt" && std::string(name) != "rsqrt") {
      x = random_f64({3, 4}, rng, -2.0, 2.0);
    }
    check_gradients(name, [op = op](const std::vector<DTensor>& v) { return op(v[0]); }, {x});
  }
  check_gradients("scale", [](const std::vector<DTensor>& v) { return scale(v[0], -1.5); },
                  {random_f64({5}, rng, -1, 1)});
}

TEST_CASE("binary VJPs with broadcasting match finite differences") {
  std::mt19937_64 rng(2);
  const std::vector<std::pair<const char*, DTensor (*)(const DTensor&, const DTensor&)>> ops = {
      {"add", add},          {"sub", sub},         {"mul", mul},        {"div", dtensor::div},
      {"pow", dtensor::pow}, {"maximum", maximum}, {"minimum", minimum}};
  for (const auto& [name, op] : ops) {
    Tensor a = random_f64({3, 4}, rng, 0.5, 2.0);
    Tensor b = random_f64({4}, rng, 0.5, 2.0);
    check_gradients(name, [op = op](const std::vector<DTensor>& v) { return op(v[0], v[1]); },
                    {a, b});
    check_gradients(name, [op = op](const std::vector<DTensor>& v) { return op(v[0], v[1]); },
                    {random_f64({3, 1}, rng, 0.5, 2), random_f64({1, 4}, rng, 0.5, 2)});
  }
}

TEST_CASE("matmul, reduction and softmax VJPs match finite differences") {
  std::mt19937_64 rng(3);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = random_f64(ta ? Shape{4, 3} : Shape{3, 4}, rng, -1, 1);
      Tensor b = random_f64(tb ? Shape{5, 4} : Shape{4, 5}, rng, -1, 1);
      check_gradients("matmul",
                      [=](const std::vector<DTensor>& v) { return matmul(v[0], v[1], ta, tb); },
                      {a, b});
    }
  }
  check_gradients("batched matmul",
                  [](const std::vector<DTensor>& v) { return matmul(v[0], v[1]); },
                  {random_f64({2, 3, 4}, rng, -1, 1), random_f64({4, 2}, rng, -1, 1)});
  Tensor x = random_f64({3, 4}, rng, -2, 2);
  check_gradients("reduce_sum", [](const std::vector<DTensor>& v) { return reduce_sum(v[0], {1}); },
                  {x});
  check_gradients("reduce_mean",
                  [](const std::vector<DTensor>& v) { return reduce_mean(v[0], {0}, true); }, {x});
  check_gradients("reduce_max", [](const std::vector<DTensor>& v) { return reduce_max(v[0], {1}); },
                  {x});
  check_gradients("reduce_min", [](const std::vector<DTensor>& v) { return reduce_min(v[0]); },
                  {x});
  check_gradients("softmax", [](const std::vector<DTensor>& v) { return softmax(v[0]); }, {x});
  check_gradients("log_softmax", [](const std::vector<DTensor>& v) { return log_softmax(v[0], 0); },
                  {x});
  check_gradients("logsumexp", [](const std::vector<DTensor>& v) { return logsumexp(v[0], 1); },
                  {x});
  Tensor labels = Tensor::empty({3}, DType::kI32);
  for (int i = 0; i < 3; ++i) labels.data<int32_t>()[i] = i;
  check_gradients(
      "cross-entropy",
      [](const std::vector<DTensor>& v) { return sparse_softmax_cross_entropy(v[0], v[1]); },
      {x, labels});
}

TEST_CASE("shape op VJPs match finite differences") {
  std::mt19937_64 rng(4);
  Tensor x = random_f64({2, 3, 4}, rng, -2, 2);
  check_gradients("reshape",
                  [](const std::vector<DTensor>& v) {
                    return reshape(v[0], {6, 4});
                  },
                  {x});
  check_gradients("transpose",
                  [](const std::vector<DTensor>& v) {
                    return transpose(v[0], {2, 0, 1});
                  },
                  {x});
  check_gradients("broadcast_to",
                  [](const std::vector<DTensor>& v) {
                    return broadcast_to(v[0], {3, 2, 3, 4});
                  },
                  {x});
  check_gradients("concat",
                  [](const std::vector<DTensor>& v) {
                    return concat({v[0], v[1]}, 1);
                  },
                  {x, random_f64({2, 2, 4}, rng, -1, 1)});
  check_gradients("slice",
                  [](const std::vector<DTensor>& v) {
                    return slice(v[0], {0, 1, 1}, {2, -1, 2});
                  },
                  {x});
  Tensor idx = Tensor::empty({4}, DType::kI32);
  for (int i = 0; i < 4; ++i) idx.data<int32_t>()[i] = (i * 2) % 3;
  check_gradients("gather", [](const std::vector<DTensor>& v) { return gather(v[0], v[1], 1); },
                  {x, idx});
  Tensor cond = kernels::binary(kernels::BinaryOp::kGreater, x, Tensor::zeros({4}, DType::kF64));
  check_gradients("where",
                  [](const std::vector<DTensor>& v) { return where(v[2], v[0], square(v[1])); },
                  {x, random_f64({4}, rng, -1, 1), cond});
}

TEST_CASE("sharded gradients equal the single-device gradients") {
  std::mt19937_64 rng(5);
  Mesh one = Mesh::create({{"d", 1}}, DeviceType::kCPU);
  // A small MLP with a cross-entropy loss: the training computation.
  auto loss = [](const DTensor& x, const DTensor& w1, const DTensor& b1, const DTensor& w2,
                 const DTensor& labels) {
    DTensor h = relu(add(matmul(x, w1), b1));
    return reduce_mean(sparse_softmax_cross_entropy(matmul(h, w2), labels));
  };
  Tensor x = random_f64({12, 6}, rng, -1, 1), w1 = random_f64({6, 5}, rng, -1, 1);
  Tensor b1 = random_f64({5}, rng, -1, 1), w2 = random_f64({5, 7}, rng, -1, 1);
  Tensor labels = Tensor::empty({12}, DType::kI32);
  for (int i = 0; i < 12; ++i) labels.data<int32_t>()[i] = (i * 5) % 7;
  auto grads_on = [&](const Layout& lx, const Layout& l1, const Layout& lb, const Layout& l2,
                      const Layout& ll) {
    std::vector<DTensor> v = {distribute(x, lx), distribute(w1, l1), distribute(b1, lb),
                              distribute(w2, l2)};
    GradientTape tape;
    for (const DTensor& t : v) tape.watch(t);
    DTensor l = loss(v[0], v[1], v[2], v[3], distribute(labels, ll));
    std::vector<Tensor> out;
    for (const DTensor& g : tape.gradient(l, v)) out.push_back(to_global(g));
    return out;
  };
  auto reference =
      grads_on(Layout::replicated(one, 2), Layout::replicated(one, 2), Layout::replicated(one, 1),
               Layout::replicated(one, 2), Layout::replicated(one, 1));
  int cases = 0;
  for (const Mesh& mesh : standard_meshes()) {
    auto l2 = all_layouts(mesh, 2, false);
    auto l1 = all_layouts(mesh, 1, false);
    for (int c = 0; c < 40; ++c) {
      const Layout& lx = l2[rng() % l2.size()];
      const Layout& lw1 = l2[rng() % l2.size()];
      const Layout& lb = l1[rng() % l1.size()];
      const Layout& lw2 = l2[rng() % l2.size()];
      const Layout& ll = l1[rng() % l1.size()];
      auto got = grads_on(lx, lw1, lb, lw2, ll);
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("x " << lx.short_string() << " w1 " << lw1.short_string() << " b1 "
                  << lb.short_string() << " w2 " << lw2.short_string() << " on "
                  << mesh.dims_string() << ", grad " << i);
        const double* a = got[i].data<double>();
        const double* b = reference[i].data<double>();
        for (int64_t e = 0; e < got[i].num_elements(); ++e)
          REQUIRE(a[e] == Approx(b[e]).epsilon(1e-9).margin(1e-12));
      }
      ++cases;
    }
  }
  CHECK(cases == 120);
}

TEST_CASE("data parallel: one gradient reduction per variable") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  Layout rep2 = Layout::replicated(mesh, 2), rep1 = Layout::replicated(mesh, 1);
  DVariable w1(random_uniform({784, 64}, rep2, 1, -0.1, 0.1), "w1");
  DVariable b1(zeros({64}, rep1), "b1");
  DVariable w2(random_uniform({64, 10}, rep2, 2, -0.1, 0.1), "w2");
  DVariable b2(zeros({10}, rep1), "b2");
  DTensor x = random_uniform({128, 784}, Layout::batch_sharded(mesh, "batch", 2), 3);
  DTensor labels = cast(
      scale(random_uniform({128}, Layout::batch_sharded(mesh, "batch", 1), 4), 9.99), DType::kI32);
  GradientTape tape;
  for (const DVariable& v : {w1, b1, w2, b2}) tape.watch(v);
  reset_collective_stats();
  DTensor h = relu(add(matmul(x, w1.value()), b1.value()));
  DTensor loss =
      reduce_mean(sparse_softmax_cross_entropy(add(matmul(h, w2.value()), b2.value()), labels));
  CHECK(collective_stats().total() == 0);  // the forward pass moves nothing
  std::vector<DTensor> grads = tape.gradient(loss, std::vector<DVariable>{w1, b1, w2, b2});
  CollectiveStats s = collective_stats();
  INFO(s.to_string());
  CHECK(s.count(CollectiveKind::kAllReduce) == 4);
  CHECK(s.total() == 4);
  for (size_t i = 0; i < grads.size(); ++i) CHECK_FALSE(grads[i].layout().is_partial());
}

TEST_CASE("a VJP learns which inputs need a gradient") {
  Mesh mesh = Mesh::create({{"batch", 2}}, DeviceType::kCPU);
  DTensor x = ones({2, 3}, Layout::replicated(mesh, 2), DType::kF32);
  DTensor c = ones({2, 3}, Layout::replicated(mesh, 2), DType::kF32);
  CHECK(gradient_needed(0));  // outside a gradient computation
  std::vector<bool> seen;
  GradientTape tape;
  tape.watch(x);
  DTensor y = add(x, c);
  DTensor out = mul(y, c);  // recorded: y depends on x
  // An identity op of (data, value) recorded by hand, to look inside its VJP.
  DTensor z = [&] {
    NoRecord pause;
    return scale(out, 1.0);
  }();
  record_op({&c, &out}, z, [&](const DTensor& g) -> std::vector<std::optional<DTensor>> {
    seen = {gradient_needed(0), gradient_needed(1), gradient_needed(2)};
    return {std::nullopt, g};
  });
  std::vector<DTensor> grads = tape.gradient(reduce_sum(z), std::vector<DTensor>{x});
  CHECK(seen == std::vector<bool>{false, true, true});  // c is data; out depends on x
  CHECK(bitwise_equal(to_global(relayout(grads[0], Layout::replicated(mesh, 2))),
                      to_global(c)));  // d/dx sum((x + c) * c) = c
  CHECK(gradient_needed(1));
  // The matmul VJP skips the data's gradient and still gives the weight's.
  DTensor w = ones({3, 4}, Layout::replicated(mesh, 2), DType::kF32);
  GradientTape tape2;
  tape2.watch(w);
  std::vector<DTensor> gw = tape2.gradient(reduce_sum(matmul(c, w)), std::vector<DTensor>{w});
  Tensor want = Tensor::empty({3, 4}, DType::kF32);
  for (int i = 0; i < 12; ++i) want.data<float>()[i] = 2.0f;
  CHECK(bitwise_equal(to_global(relayout(gw[0], Layout::replicated(mesh, 2))), want));
}
