// Captured steps against eager ones: the seed MLP's training step (forward, backward, Adam) and
// other optimizers replay to the same bits as eager steps from the same start, on meshes batch=1,
// batch=8 and batch=2,model=4 (in one process, and across processes under mpirun); a new batch
// shape retraces; what a trace cannot capture is rejected with the op's name.
#include "train/capture/function.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "examples/mnist/model.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "runtime/process.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"
#include "train/optim/optimizers.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::same_bits;
using dtensor::testing::test_mesh;

namespace {

std::vector<DTensor> values(const std::vector<DVariable>& vars) {
  std::vector<DTensor> out;
  for (const DVariable& v : vars) out.push_back(v.value());
  return out;
}

std::vector<DTensor> slot_values(const Optimizer& opt) {
  std::vector<DTensor> out;
  for (const auto& [name, slot] : opt.slots()) out.push_back(slot.value());
  return out;
}

struct Batch {
  DTensor images, labels;
};

Batch make_batch(const examples::Mlp& model, int64_t size, uint64_t seed) {
  DTensor images = random_uniform({size, 784}, model.batch_layout(2), seed);
  DTensor labels =
      cast(random_uniform({size}, model.batch_layout(1), seed + 1000, 0.0, 10.0), DType::kI32);
  return {images, labels};
}

// The seed's training step: mean cross-entropy, its gradient, one optimizer update.
DTensor train_step(const examples::Mlp& model, Optimizer& opt, const DTensor& images,
                   const DTensor& labels) {
  const std::vector<DVariable>& vars = model.variables();
  GradientTape tape;
  for (const DVariable& v : vars) tape.watch(v);
  DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model(images), labels));
  opt.apply(vars, tape.gradient(loss, vars));
  return loss;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>()>;

// N eager steps and N captured steps from the same start: losses, weights and slots bitwise.
void check_replay_matches_eager(const Mesh& mesh, const MakeOptimizer& make_optimizer, int steps,
                                const std::vector<int64_t>& batch_sizes) {
  examples::Mlp eager_model(mesh, {784, 700, 500, 10}, 22);
  examples::Mlp captured_model(mesh, {784, 700, 500, 10}, 22);
  std::unique_ptr<Optimizer> eager_opt = make_optimizer();
  std::unique_ptr<Optimizer> captured_opt = make_optimizer();
  Function step = function([&](const std::vector<DTensor>& args) {
    return std::vector<DTensor>{train_step(captured_model, *captured_opt, args[0], args[1])};
  });
  int64_t traces = 0;
  std::vector<int64_t> seen;
  for (int s = 0; s < steps; ++s) {
    const int64_t size = batch_sizes[static_cast<size_t>(s) % batch_sizes.size()];
    if (std::find(seen.begin(), seen.end(), size) == seen.end()) {
      seen.push_back(size);
      ++traces;
    }
    Batch b = make_batch(eager_model, size, 100 + static_cast<uint64_t>(s));
    DTensor eager_loss = train_step(eager_model, *eager_opt, b.images, b.labels);
    DTensor captured_loss = step({b.images, b.labels})[0];
    INFO("mesh " << mesh.dims_string() << " step " << s << " batch " << size);
    CHECK(same_bits(eager_loss, captured_loss));
    std::vector<DTensor> ev = values(eager_model.variables());
    std::vector<DTensor> cv = values(captured_model.variables());
    for (size_t i = 0; i < ev.size(); ++i) CHECK(same_bits(ev[i], cv[i]));
    std::vector<DTensor> es = slot_values(*eager_opt);
    std::vector<DTensor> cs = slot_values(*captured_opt);
    REQUIRE(es.size() == cs.size());
    for (size_t i = 0; i < es.size(); ++i) CHECK(same_bits(es[i], cs[i]));
  }
  CHECK(step.trace_count() == traces);
  CHECK(step.replay_count() == steps - traces);
  CHECK(captured_opt->step() == steps);
}

// The training step of a small MLP (784-64-32-10) with Adam, captured and traced once on a batch
// of 32 under the calling thread's policy.
struct TracedMlpStep {
  examples::Mlp model;
  Adam opt{1e-3};
  Batch batch;
  Function step;

  explicit TracedMlpStep(const Mesh& mesh)
      : model(mesh, {784, 64, 32, 10}, 3),
        batch(make_batch(model, 32, 9)),
        step(function([this](const std::vector<DTensor>& args) {
          return std::vector<DTensor>{train_step(model, opt, args[0], args[1])};
        })) {
    step(arguments());
  }
  TracedMlpStep(const TracedMlpStep&) = delete;
  TracedMlpStep& operator=(const TracedMlpStep&) = delete;

  std::vector<DTensor> arguments() const { return {batch.images, batch.labels}; }
};

std::vector<Mesh> seed_meshes() {
  std::vector<Mesh> meshes;
  if (this_process().count == 1) meshes.push_back(test_mesh({{"batch", 1}}));
  meshes.push_back(test_mesh({{"batch", 8}}));
  meshes.push_back(test_mesh({{"batch", 2}, {"model", 4}}));
  return meshes;
}

}  // namespace

TEST_CASE("a captured MLP step with Adam replays eager's bits on every seed mesh") {
  for (const Mesh& mesh : seed_meshes()) {
    check_replay_matches_eager(mesh, [] { return std::make_unique<Adam>(1e-3); }, 4, {64});
  }
}

TEST_CASE("a captured mixed_bfloat16 MLP step with Adam replays eager's bits on every seed mesh") {
  PolicyScope mixed(Policy::mixed_bfloat16());
  for (const Mesh& mesh : seed_meshes()) {
    check_replay_matches_eager(mesh, [] { return std::make_unique<Adam>(1e-3); }, 3, {64});
  }
}

TEST_CASE("the mixed_bfloat16 step fuses its six activation and gradient casts", "[local]") {
  // The same step under both policies: mixed adds the casts of x, h1, h2 and of the three
  // incoming gradients (each after a product, or ending a relu-grad segment), all fused, each
  // writing its bf16 value for the products that read it.
  const Mesh mesh = test_mesh({{"batch", 8}});
  auto counts = [&](const Policy& policy) {
    PolicyScope scope(policy);
    TracedMlpStep traced(mesh);
    return std::make_pair(traced.step.fused_calls(traced.arguments()),
                          traced.step.fused_results(traced.arguments()));
  };
  const auto [f32_calls, f32_results] = counts(Policy::float32());
  const auto [mixed_calls, mixed_results] = counts(Policy::mixed_bfloat16());
  CHECK(f32_calls == 4);  // relu_grad and mul of both hidden layers' VJPs
  CHECK(mixed_calls == f32_calls + 6);
  CHECK(mixed_results == f32_results + 6);
}

TEST_CASE("captured SGD with momentum and AdamW steps replay eager's bits") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  check_replay_matches_eager(
      mesh, [] { return std::make_unique<SGD>(0.05, 0.9, /*nesterov=*/true); }, 3, {32});
  check_replay_matches_eager(mesh, [] { return std::make_unique<SGD>(0.05); }, 3, {32});
  check_replay_matches_eager(mesh, [] { return std::make_unique<AdamW>(constant_lr(1e-3), 0.01); },
                             3, {32});
}

TEST_CASE("a new batch shape retraces, a known one replays") {
  const Mesh mesh = test_mesh({{"batch", 2}, {"model", 4}});
  // 64, 32, 64, 32, 64: two traces, three replays, every step equal to eager.
  check_replay_matches_eager(mesh, [] { return std::make_unique<Adam>(1e-3); }, 5, {64, 32});
}

TEST_CASE("ops of every family replay eager's bits from kernels that own their attributes") {
  // Replays run long after the op functions that made the kernels returned: a kernel holding a
  // reference to one of their locals reads freed stack here (AddressSanitizer reports it).
  const Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  Layout rows({"x", Layout::kUnsharded}, mesh);
  auto body = [](const std::vector<DTensor>& a) {
    const DTensor& x = a[0];
    DTensor t = transpose(x, {1, 0});
    DTensor s = slice(t, {1, 0}, {6, -1});
    DTensor c = concat({s, s}, 0);
    DTensor r = reshape(c, {-1});
    DTensor n = layer_norm(x, a[1], a[2]);
    DTensor sm = softmax(n, 1);
    DTensor lse = logsumexp(x, 0);
    DTensor g = gather(x, a[3], 0);
    DTensor b = broadcast_to(a[1], {8, 12});
    DTensor w = where(greater(x, b), x, scale(b, 0.5));
    return std::vector<DTensor>{reduce_sum(r), sm,
                                lse,           reduce_max(g, {1}),
                                argmax(w, 1),  one_hot(a[3], 5),
                                sqrt(abs(x)),  tanh(sigmoid(gelu(x)))};
  };
  Function f = function(body);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    std::vector<DTensor> args{
        random_uniform({8, 12}, rows, seed, -1, 1),
        random_uniform({12}, Layout::replicated(mesh, 1), seed + 10),
        random_uniform({12}, Layout::replicated(mesh, 1), seed + 20),
        cast(random_uniform({3}, Layout::replicated(mesh, 1), seed, 0, 8), DType::kI32)};
    std::vector<DTensor> eager = body(args);
    std::vector<DTensor> captured = f(args);
    REQUIRE(eager.size() == captured.size());
    for (size_t i = 0; i < eager.size(); ++i) {
      INFO("output " << i << " call " << seed);
      CHECK(same_bits(eager[i], captured[i]));
    }
  }
  CHECK(f.trace_count() == 1);
  CHECK(f.replay_count() == 2);
}

TEST_CASE("a variable created while tracing persists and updates on replay") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout vector = Layout::batch_sharded(mesh, "batch", 1);
  // Created on the first call only, like tf.function's first-call variables (and like an
  // optimizer's slots).
  std::optional<DVariable> total;
  Function accumulate = function([&](const std::vector<DTensor>& args) {
    if (!total) total.emplace(zeros({16}, vector), "total");
    total->assign_add(mul(args[0], args[0]));
    total->assign_sub(ones({16}, vector));
    return std::vector<DTensor>{total->value()};
  });
  DVariable eager_total(zeros({16}, vector), "eager_total");
  for (uint64_t s = 0; s < 4; ++s) {
    DTensor x = random_uniform({16}, vector, s);
    eager_total.assign_add(mul(x, x));
    eager_total.assign_sub(ones({16}, vector));
    DTensor out = accumulate({x})[0];
    CHECK(same_bits(out, eager_total.value()));
    CHECK(same_bits(total->value(), eager_total.value()));
  }
  CHECK(accumulate.trace_count() == 1);
}

TEST_CASE("steps the trace cannot capture are rejected naming the op", "[local]") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout vector = Layout::batch_sharded(mesh, "batch", 1);
  DTensor x = random_uniform({16}, vector, 1);
  Function reads = function([](const std::vector<DTensor>& a) {
    const float first = to_global(a[0]).data<float>()[0];
    return std::vector<DTensor>{scale(a[0], first)};
  });
  const std::string host_read =
      "cannot run inside a captured step: it reads tensor values on the host, which a replay "
      "would not read again; return the DTensor from the step and read it outside";
  CHECK_THROWS_MATCHES(reads({x}), UnimplementedError, Message("[to_global] " + host_read));
  // Nothing was cached: the next call traces, and fails, again.
  CHECK_THROWS_MATCHES(reads({x}), UnimplementedError, Message("[to_global] " + host_read));
  CHECK(reads.trace_count() == 0);

  Function unpacks = function([](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{pack(unpack(a[0]), a[0].layout())};
  });
  CHECK_THROWS_MATCHES(unpacks({x}), UnimplementedError, Message("[unpack] " + host_read));

  Function packs = function([&](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{add(a[0], pack(x.shards(), vector))};
  });
  CHECK_THROWS_MATCHES(packs({x}), UnimplementedError,
                       Message("[pack] cannot run inside a captured step: its host data would be "
                               "frozen into the trace; pass the DTensor to the step as an "
                               "argument"));

  Function noise = function([&](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{add(a[0], random_uniform({16}, vector, 7))};
  });
  CHECK_THROWS_MATCHES(noise({x}), UnimplementedError,
                       Message("[random_uniform] cannot run inside a captured step: its values "
                               "come from a host seed that the trace would freeze; draw them "
                               "outside the step and pass them as an argument"));

  // Shards built on the host from a traced value: the recorder never saw them made.
  Function host_copy = function([](const std::vector<DTensor>& a) {
    DTensor y = exp(a[0]);
    std::vector<Tensor> copies;
    for (const Tensor& t : y.shards()) copies.push_back(t.clone());
    DTensor z = DTensor::from_trusted_shards(y.shape(), y.dtype(), y.layout(), copies);
    return std::vector<DTensor>{neg(z)};
  });
  CHECK_THROWS_MATCHES(
      host_copy({x}), UnimplementedError,
      Message("[function] run_local reads f32[16] [batch], which the step computed by a path "
              "the trace cannot follow (host code on the shards, or an operation without capture "
              "support); its replay would be stale"));
}

TEST_CASE("a replay whose values call for another layout decision than the trace's raises",
          "[local]") {
  // A partial sum passes through mul only when the factor is finite (op_internal.h): the trace
  // decides with finite values, a replay with an infinite factor cannot follow.
  const Mesh mesh = test_mesh({{"x", 2}});
  const Layout replicated = Layout::replicated(mesh, 1);
  const Layout partial = replicated.with_partial({{"x", ReduceOp::kSum}});
  DTensor term = relayout(random_uniform({4}, replicated, 3), partial);
  Function product =
      function([](const std::vector<DTensor>& a) { return std::vector<DTensor>{mul(a[0], a[1])}; });
  DTensor finite = random_uniform({4}, replicated, 4);
  CHECK(same_bits(product({term, finite})[0], mul(term, finite)));
  CHECK(same_bits(product({term, finite})[0], mul(term, finite)));
  CHECK_THROWS_MATCHES(
      product({term, fill({4}, replicated, INFINITY)}), UnimplementedError,
      Message("[mul] the captured step chose from the values of a factor how to pass a partial "
              "sum through this product, and the values now call for the other choice; run this "
              "step eagerly"));
  CHECK(product.trace_count() == 1);
}

TEST_CASE("a replay checks its labels: an out-of-range label throws eager's error", "[local]") {
  // Regression: the range check ran on the host while tracing only, so a replay read x[label]
  // out of bounds. Both the fused kernel (classes whole) and the class-sharded path are covered.
  const Mesh mesh = test_mesh({{"batch", 2}, {"model", 4}});
  for (const Layout& ll :
       {Layout::batch_sharded(mesh, "batch", 2), Layout({"batch", "model"}, mesh)}) {
    const Layout lb = Layout::batch_sharded(mesh, "batch", 1);
    DTensor logits = random_uniform({4, 8}, ll, 6, -1, 1);
    auto labels_with = [&](int32_t bad) {
      Tensor t = Tensor::empty({4}, DType::kI32);
      for (int32_t i = 0; i < 4; ++i) t.data<int32_t>()[i] = i;
      t.data<int32_t>()[3] = bad;
      return distribute(t, lb);
    };
    Function loss = function([](const std::vector<DTensor>& a) {
      return std::vector<DTensor>{reduce_mean(sparse_softmax_cross_entropy(a[0], a[1]))};
    });
    DTensor good = labels_with(7);
    INFO(logits.short_string());
    CHECK(same_bits(loss({logits, good})[0],
                    reduce_mean(sparse_softmax_cross_entropy(logits, good))));
    for (int32_t bad : {8, 1000000, -1}) {
      CHECK_THROWS_MATCHES(loss({logits, labels_with(bad)}), InvalidArgumentError,
                           Message("[sparse_softmax_cross_entropy] label " + std::to_string(bad) +
                                   " at position [3] is outside [0, 8)"));
    }
    CHECK(loss.program_string({logits, good}).rfind("label_check, ", 0) == 0);
    // The failed replays left nothing behind.
    CHECK(same_bits(loss({logits, good})[0],
                    reduce_mean(sparse_softmax_cross_entropy(logits, good))));
    CHECK(loss.trace_count() == 1);
  }
}

TEST_CASE("a replay checks gather indices in the kernel, with eager's error", "[local]") {
  const Mesh mesh = test_mesh({{"batch", 2}});
  DTensor params = random_uniform({5, 3}, Layout::replicated(mesh, 2), 8, -1, 1);
  auto indices = [&](int32_t last) {
    Tensor t = Tensor::empty({4}, DType::kI32);
    for (int32_t i = 0; i < 4; ++i) t.data<int32_t>()[i] = i;
    t.data<int32_t>()[3] = last;
    return distribute(t, Layout::batch_sharded(mesh, "batch", 1));
  };
  Function g = function(
      [](const std::vector<DTensor>& a) { return std::vector<DTensor>{gather(a[0], a[1], 0)}; });
  DTensor good = indices(4);
  CHECK(same_bits(g({params, good})[0], gather(params, good, 0)));
  for (int32_t bad : {5, -3}) {
    DTensor wrong = indices(bad);
    const std::string message = "[gather] index " + std::to_string(bad) +
                                " at position [1] is outside [0, 5)";  // within its shard
    CHECK_THROWS_MATCHES(gather(params, wrong, 0), InvalidArgumentError, Message(message));
    CHECK_THROWS_MATCHES(g({params, wrong}), InvalidArgumentError, Message(message));
  }
  CHECK(same_bits(g({params, good})[0], gather(params, good, 0)));
  CHECK(g.trace_count() == 1);
}

TEST_CASE("signatures are cached up to a bound; eager mode and nested functions do not trace") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  auto body = [](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{relu(scale(a[0], 2.0))};
  };
  FunctionOptions two;
  two.max_signatures = 2;
  Function f = function(body, two);
  auto arg = [&](int64_t n) {
    return random_uniform({n}, Layout::batch_sharded(mesh, "batch", 1), 5, -1, 1);
  };
  for (int64_t n : {8, 16, 8, 24, 8, 16}) {
    DTensor x = arg(n);
    CHECK(same_bits(f({x})[0], body({x})[0]));
  }
  // 8, 16 trace; 8 replays; 24 traces (16 goes); 8 replays; 16 traces again.
  CHECK(f.trace_count() == 4);
  CHECK(f.replay_count() == 2);
  CHECK(f.program_string({arg(8)}) == "run_local, run_local");
  CHECK(f.program_string({arg(32)}).empty());
  // A layout is part of the signature, too.
  DTensor replicated = random_uniform({8}, Layout::replicated(mesh, 1), 5, -1, 1);
  CHECK(same_bits(f({replicated})[0], body({replicated})[0]));
  CHECK(f.trace_count() == 5);

  FunctionOptions eager;
  eager.eager = true;
  Function e = function(body, eager);
  CHECK(same_bits(e({arg(8)})[0], body({arg(8)})[0]));
  CHECK(e.trace_count() == 0);

  // A function called while another traces runs inline: it becomes part of the outer program.
  Function inner = function(body);
  Function outer = function([&](const std::vector<DTensor>& a) { return inner({exp(a[0])}); });
  for (int i = 0; i < 2; ++i) {
    DTensor x = arg(8);
    CHECK(same_bits(outer({x})[0], body({exp(x)})[0]));
  }
  CHECK(inner.trace_count() == 0);
  CHECK(outer.trace_count() == 1);
  CHECK(outer.program_string({arg(8)}) == "run_local, run_local, run_local");
}

TEST_CASE("the captured MLP step replays calls, not ops: no tape, one apply") {
  TracedMlpStep traced(test_mesh({{"batch", 8}}));
  const std::string program = traced.step.program_string(traced.arguments());
  INFO(program);
  // Six variable reads for the forward pass and six more where the tape looks the variables up,
  // the gradients' all-reduces as relayouts, and the update as one call.
  CHECK(program.rfind("DVariable::value, ", 0) == 0);
  CHECK(program.find("Optimizer::apply") ==
        program.size() - std::string("Optimizer::apply").size());
  CHECK(program.find("relayout") != std::string::npos);
}
