// Gradients: every op's VJP against central finite differences (f64, one device), sharded
// gradients against the single-device ones, and the data-parallel reduction count.
#include "ops/autograd.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
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

namespace {

// The gradients of sum(f(inputs) * weights) for the float inputs, each distributed in its layout,
// as global tensors (one per input; empty for the others).
std::vector<Tensor> gradients_in(const Fn& f, const std::vector<Tensor>& inputs,
                                 const std::vector<Layout>& layouts, const Tensor& weights) {
  std::vector<DTensor> x;
  for (size_t i = 0; i < inputs.size(); ++i) x.push_back(distribute(inputs[i], layouts[i]));
  GradientTape tape;
  for (const DTensor& t : x) {
    if (is_floating(t.dtype())) tape.watch(t);
  }
  DTensor y = f(x);
  DTensor w = distribute(weights, Layout::replicated(y.mesh(), y.rank()));
  std::vector<DTensor> grads = tape.gradient(reduce_sum(mul(y, w)), x);
  std::vector<Tensor> out;
  for (size_t i = 0; i < grads.size(); ++i)
    out.push_back(is_floating(x[i].dtype()) ? to_global(grads[i]) : Tensor());
  return out;
}

void require_close(const Tensor& got, const Tensor& want, double eps = 1e-9) {
  REQUIRE(got.shape() == want.shape());
  for (int64_t e = 0; e < got.num_elements(); ++e) {
    INFO("element " << e);
    REQUIRE(got.data<double>()[e] == Approx(want.data<double>()[e]).epsilon(eps).margin(1e-12));
  }
}

Tensor f64_tensor(const Shape& shape, const std::vector<double>& values) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  for (size_t i = 0; i < values.size(); ++i) t.data<double>()[i] = values[i];
  return t;
}

}  // namespace

// Regression: layer_norm was never recorded, so gamma, beta and x got zero gradients.
TEST_CASE("layer_norm records its gradient for x, gamma and beta") {
  std::mt19937_64 rng(6);
  const Fn f = [](const std::vector<DTensor>& v) { return layer_norm(v[0], v[1], v[2], 1e-3); };
  Tensor x = random_f64({3, 5}, rng, -2, 2), gamma = random_f64({5}, rng, 0.5, 1.5),
         beta = random_f64({5}, rng, -1, 1);
  check_gradients("layer_norm", f, {x, gamma, beta});
  check_gradients("layer_norm rank 3", f,
                  {random_f64({2, 2, 4}, rng, -2, 2), random_f64({4}, rng, 0.5, 1.5),
                   random_f64({4}, rng, -1, 1)});
  // Upstream of layer_norm: the gradient reaches w through the matmul.
  check_gradients(
      "matmul then layer_norm",
      [](const std::vector<DTensor>& v) { return layer_norm(matmul(v[0], v[1]), v[2], v[3]); },
      {random_f64({3, 4}, rng, -1, 1), random_f64({4, 5}, rng, -1, 1), gamma, beta});
  // Sharded: the same gradients in every layout of x on each mesh.
  Mesh one = Mesh::create({{"d", 1}}, DeviceType::kCPU);
  Tensor weights = random_f64({3, 5}, rng, -1, 1);
  auto want = gradients_in(
      f, {x, gamma, beta},
      {Layout::replicated(one, 2), Layout::replicated(one, 1), Layout::replicated(one, 1)},
      weights);
  for (const Mesh& mesh : standard_meshes()) {
    for (const Layout& lx : all_layouts(mesh, 2, true)) {
      for (const Layout& lg : all_layouts(mesh, 1, false)) {
        INFO("x " << lx.short_string() << " gamma, beta " << lg.short_string());
        auto got = gradients_in(f, {x, gamma, beta}, {lx, lg, lg}, weights);
        for (size_t i = 0; i < got.size(); ++i) require_close(got[i], want[i]);
      }
    }
  }
}

// Regression: only traced_relayout recorded; a plain relayout of a tracked value detached it.
TEST_CASE("relayout on a tape passes the gradient back") {
  for (const Mesh& mesh : standard_meshes()) {
    Tensor x = f64_tensor({4, 2}, {1, -2, 3, 0.5, -1, 2, 4, -3});
    for (const Layout& from : all_layouts(mesh, 2, false)) {
      for (const Layout& to : all_layouts(mesh, 2, true)) {
        INFO(from.short_string() << " -> " << to.short_string());
        DTensor v = distribute(x, from);
        GradientTape tape;
        tape.watch(v);
        DTensor moved = relayout(v, to);
        DTensor g = tape.gradient(reduce_sum(square(moved)), std::vector<DTensor>{v})[0];
        Tensor got = to_global(g);
        for (int64_t e = 0; e < 8; ++e) REQUIRE(got.data<double>()[e] == 2 * x.data<double>()[e]);
      }
    }
  }
}

// Regression: cast to the same dtype returned its input, the tape recorded x -> x, and the
// gradient doubled per cast. Identity ops keep the value's identity and record nothing.
TEST_CASE("identity ops do not double the gradient") {
  Mesh mesh = Mesh::create({{"batch", 2}}, DeviceType::kCPU);
  Tensor x = f64_tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  DTensor v = distribute(x, Layout::batch_sharded(mesh, "batch", 2));
  GradientTape tape;
  tape.watch(v);
  DTensor same = cast(cast(cast(v, DType::kF64), DType::kF64), DType::kF64);
  CHECK(same.id() == v.id());
  same = relayout(traced_relayout(broadcast_to(same, {2, 3}), v.layout()), v.layout());
  DTensor loss = reduce_sum(mul(same, v));  // d/dv sum(v * v) = 2v
  Tensor got = to_global(tape.gradient(loss, std::vector<DTensor>{v})[0]);
  for (int64_t e = 0; e < 6; ++e) CHECK(got.data<double>()[e] == 2 * x.data<double>()[e]);
  // Through a real cast and back the gradient is still one per element.
  GradientTape tape2;
  tape2.watch(v);
  DTensor round = cast(cast(cast(v, DType::kF32), DType::kF32), DType::kF64);
  Tensor ones_got = to_global(tape2.gradient(reduce_sum(round), std::vector<DTensor>{v})[0]);
  for (int64_t e = 0; e < 6; ++e) CHECK(ones_got.data<double>()[e] == 1.0);
}

// Regression: every tied element got the full gradient; TF and JAX split it among the ties,
// also when the reduced axis is sharded (the tie count is global).
TEST_CASE("reduce_max and reduce_min split the gradient among ties") {
  // Rows with 2, 3 and 1 maxima, and minima tied across the row.
  Tensor x = f64_tensor({3, 6}, {2, 1, 2, 0, 0, 1,  //
                                 5, 5, 5, 1, 1, 1,  //
                                 0, 3, 1, 1, 0, 0});
  const std::vector<double> max_rows = {0.5,     0,       0.5,     0, 0, 0,  //
                                        1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0, 0,  //
                                        0,       1,       0,       0, 0, 0};
  const std::vector<double> min_rows = {0,       0, 0, 0.5,     0.5,     0,        //
                                        0,       0, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3,  //
                                        1.0 / 3, 0, 0, 0,       1.0 / 3, 1.0 / 3};
  std::vector<double> max_all(18, 0.0), min_all(18, 0.0);
  for (int e : {6, 7, 8}) max_all[e] = 1.0 / 3;
  for (int e : {3, 4, 12, 16, 17}) min_all[e] = 1.0 / 5;
  struct Case {
    const char* name;
    std::function<DTensor(const DTensor&)> f;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"max over rows", [](const DTensor& v) { return reduce_max(v, {1}); }, max_rows},
      {"min over rows", [](const DTensor& v) { return reduce_min(v, {-1}, true); }, min_rows},
      {"max of all", [](const DTensor& v) { return reduce_max(v); }, max_all},
      {"min of all", [](const DTensor& v) { return reduce_min(v, {}, true); }, min_all}};
  std::vector<Mesh> meshes = standard_meshes();
  meshes.push_back(Mesh::create({{"d", 1}}, DeviceType::kCPU));
  for (const Case& c : cases) {
    for (const Mesh& mesh : meshes) {
      for (const Layout& layout : all_layouts(mesh, 2, true)) {
        INFO(c.name << " on " << layout.short_string());
        DTensor v = distribute(x, layout);
        GradientTape tape;
        tape.watch(v);
        DTensor loss = reduce_sum(c.f(v));
        Tensor got = to_global(tape.gradient(loss, std::vector<DTensor>{v})[0]);
        for (int64_t e = 0; e < 18; ++e) {
          INFO("element " << e);
          REQUIRE(got.data<double>()[e] == Approx(c.want[static_cast<size_t>(e)]).epsilon(1e-12));
        }
      }
    }
  }
}

// Regression: gather's VJP built its target layout one spec at a time, through layouts that use a
// mesh dim twice, and threw LayoutError (params replicated, indices batch-sharded, consumer
// [unsharded,batch]).
TEST_CASE("gather gradient in every layout of params, indices and consumer") {
  std::mt19937_64 rng(7);
  Tensor params = random_f64({5, 3}, rng, -1, 1);
  Tensor idx = Tensor::empty({4}, DType::kI32);
  for (int i = 0; i < 4; ++i) idx.data<int32_t>()[i] = (i * 3) % 5;
  idx.data<int32_t>()[3] = idx.data<int32_t>()[0];  // a repeated row accumulates
  Tensor w = random_f64({4, 3}, rng, -1, 1);
  const Fn f = [](const std::vector<DTensor>& v) { return mul(gather(v[0], v[1]), v[2]); };
  Mesh one = Mesh::create({{"d", 1}}, DeviceType::kCPU);
  Tensor weights = random_f64({4, 3}, rng, -1, 1);
  auto want = gradients_in(
      f, {params, idx, w},
      {Layout::replicated(one, 2), Layout::replicated(one, 1), Layout::replicated(one, 2)},
      weights);
  SECTION("the reported case") {
    Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
    Layout consumer({Layout::kUnsharded, "batch"}, mesh);
    auto got = gradients_in(
        f, {params, idx, w},
        {Layout::replicated(mesh, 2), Layout::batch_sharded(mesh, "batch", 1), consumer}, weights);
    require_close(got[0], want[0]);
    require_close(got[2], want[2]);
  }
  SECTION("every layout") {
    int cases = 0;
    for (const Mesh& mesh : standard_meshes()) {
      auto l2 = all_layouts(mesh, 2, false);
      auto l1 = all_layouts(mesh, 1, false);
      for (const Layout& lp : l2) {
        for (const Layout& li : l1) {
          for (const Layout& lw : l2) {
            if (mesh.rank() == 3 && rng() % 4 != 0) continue;  // a quarter of the 676 on 2x2x2
            INFO("params " << lp.short_string() << " indices " << li.short_string() << " consumer "
                           << lw.short_string());
            auto got = gradients_in(f, {params, idx, w}, {lp, li, lw}, weights);
            require_close(got[0], want[0]);
            require_close(got[2], want[2]);
            ++cases;
          }
        }
      }
    }
    CHECK(cases > 150);
  }
}

// Regression: watch(v) tracked the id of v's value at that moment; after v.assign(...) the new
// value had a new id and its gradient was zero.
TEST_CASE("watch(variable) tracks reads after assign") {
  Mesh mesh = Mesh::create({{"batch", 2}}, DeviceType::kCPU);
  Layout layout = Layout::batch_sharded(mesh, "batch", 2);
  DVariable v(distribute(f64_tensor({2, 2}, {1, 2, 3, 4}), layout), "v");
  GradientTape tape;
  tape.watch(v);
  DTensor before = v.value();
  v.assign(distribute(f64_tensor({2, 2}, {-1, 5, 0.5, 2}), Layout::replicated(mesh, 2)));
  DTensor loss = reduce_sum(square(v.value()));
  Tensor got = to_global(tape.gradient(loss, std::vector<DVariable>{v})[0]);
  const std::vector<double> want = {-2, 10, 1, 4};  // 2 * the new value
  for (int64_t e = 0; e < 4; ++e) CHECK(got.data<double>()[e] == want[static_cast<size_t>(e)]);
  // A read from before the assign is a read of the same variable: the gradients add up.
  v.assign_add(distribute(f64_tensor({2, 2}, {1, 1, 1, 1}), layout));
  DTensor both = add(reduce_sum(before), reduce_sum(square(v.value())));
  Tensor sum = to_global(tape.gradient(both, std::vector<DVariable>{v})[0]);
  const std::vector<double> want_sum = {1, 13, 4, 7};  // 1 + 2 * (new value + 1)
  for (int64_t e = 0; e < 4; ++e) CHECK(sum.data<double>()[e] == want_sum[static_cast<size_t>(e)]);
}

// Regression: an op reaching a tape without a VJP (layer_norm did) dropped the gradient silently.
TEST_CASE("an op without a VJP throws when the gradient reaches it") {
  Mesh mesh = Mesh::create({{"batch", 2}}, DeviceType::kCPU);
  DTensor x = ones({2, 3}, Layout::replicated(mesh, 2), DType::kF64);
  GradientTape tape;
  tape.watch(x);
  DTensor untraced = [&] {
    NoRecord pause;
    return square(x);
  }();
  note_untraced("my_op:7", {&x}, untraced);  // as an expansion without a VJP leaves it
  DTensor off_path = exp(untraced);
  DTensor on_path = mul(x, relayout(untraced, Layout::batch_sharded(mesh, "batch", 2)));
  // The target does not depend on it: no error.
  CHECK_NOTHROW(tape.gradient(reduce_sum(x), std::vector<DTensor>{x}));
  CHECK_THROWS_MATCHES(
      tape.gradient(reduce_sum(on_path), std::vector<DTensor>{x}), UnimplementedError,
      Catch::Matchers::Message("[GradientTape::gradient] op 'my_op' has no gradient (VJP), and the "
                               "gradient of the target reaches its output f64[2,3] "
                               "[unsharded,unsharded]"));
  CHECK_THROWS_AS(tape.gradient(reduce_sum(off_path), std::vector<DTensor>{x}), UnimplementedError);
  // An op that records its VJP replaces the placeholder its expansion left.
  DTensor y = [&] {
    NoRecord pause;
    return scale(x, 3.0);
  }();
  note_untraced("scale", {&x}, y);
  record_op({&x}, y, [](const DTensor& g) -> std::vector<std::optional<DTensor>> {
    NoRecord pause;
    return {scale(g, 3.0)};
  });
  Tensor g = to_global(tape.gradient(reduce_sum(y), std::vector<DTensor>{x})[0]);
  for (int64_t e = 0; e < 6; ++e) CHECK(g.data<double>()[e] == 3.0);
}
