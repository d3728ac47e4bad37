// Differential test of captured steps: random training steps (op chains over random layouts,
// partial and uneven ones included, dropout from a SeedGenerator; gradient tapes; optimizers;
// arguments aliased with each other, with closure constants and with variables' value()), each
// traced as a Function and replayed on fresh arguments against the same step run eagerly, bit for
// bit, on every test mesh.
//
// Every case is a function of (base seed, mesh, case index): a difference prints the seed, the
// case and the call, and the step's description, and DTENSOR_CAPTURE_DIFF_CASE=<index> reruns
// that case alone. Environment:
//   DTENSOR_CAPTURE_DIFF_STEPS  steps (calls compared) per mesh, default 10000 (nightly: more)
//   DTENSOR_CAPTURE_DIFF_SEED   base seed, default 25
//   DTENSOR_CAPTURE_DIFF_CASE   run this case index only
// Under Bazel sharding (TEST_TOTAL_SHARDS) shard k runs the cases whose index is k modulo the
// shard count.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "dtensor/variable.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/seed_generator.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::same_bits;
using dtensor::testing::test_mesh;

namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

// ---- The random step ----------------------------------------------------------------------------

// Every value of a step is one of three kinds: activations [m, n], weights [n, n], biases [n].
enum Kind { kActivation, kWeight, kBias, kNumKinds };

// Where an operand comes from: an argument, a closure constant, a variable (read with value() at
// every use), or the result of an earlier op.
enum class From { kArgument, kConstant, kVariable, kResult };

struct Operand {
  From from;
  int index;
};

enum class OpKind {
  kUnary,
  kBinary,
  kBias,
  kMatmul,
  kDense,
  kRelayout,
  kRowScale,
  kSoftmax,
  kCenter,
  kWhere,
  kLayerNorm,
  kDropout,
  kTranspose,
};
constexpr int kNumOpKinds = 13;

struct Op {
  OpKind kind;
  int code = 0;  // which unary or binary op; dense: with relu
  Operand a{}, b{}, c{};
  std::optional<Layout> layout;  // kRelayout
  double alpha = 1.0;            // unary scale; dropout rate
};

struct Source {
  Kind kind;
  Layout layout;
};

// How a call passes argument i: fresh values, or an alias of something the step also sees.
struct Alias {
  enum Mode { kFresh, kArgument, kConstant, kVariable } mode = kFresh;
  int index = 0;
};

enum class Training { kNone, kGradients, kSgd, kMomentum, kAdam };

struct StepSpec {
  int64_t m, n;
  std::vector<Source> arguments, constants, variables;
  std::vector<Op> ops;
  std::vector<int> outputs;  // op results returned
  Training training = Training::kNone;
  std::vector<int> watched_arguments;  // weight or bias arguments the tape also watches
  std::string describe() const;
};

Shape shape_of(Kind kind, int64_t m, int64_t n) {
  switch (kind) {
    case kActivation:
      return {m, n};
    case kWeight:
      return {n, n};
    default:
      return {n};
  }
}

const char* kUnaryNames[] = {"relu", "neg", "tanh", "sigmoid", "abs", "scale", "gelu"};
const char* kBinaryNames[] = {"add", "sub", "mul", "maximum", "minimum"};
const char* kKindNames[] = {"activation", "weight", "bias"};

std::string operand_string(const Operand& o) {
  switch (o.from) {
    case From::kArgument:
      return "arg" + std::to_string(o.index);
    case From::kConstant:
      return "const" + std::to_string(o.index);
    case From::kVariable:
      return "var" + std::to_string(o.index) + ".value()";
    default:
      return "v" + std::to_string(o.index);
  }
}

std::string StepSpec::describe() const {
  std::ostringstream s;
  s << "m=" << m << " n=" << n << "\n";
  auto list = [&](const char* name, const std::vector<Source>& sources) {
    for (size_t i = 0; i < sources.size(); ++i) {
      s << "  " << name << i << ": " << kKindNames[sources[i].kind] << " "
        << shape_to_string(shape_of(sources[i].kind, m, n)) << " "
        << sources[i].layout.short_string() << "\n";
    }
  };
  list("arg", arguments);
  list("const", constants);
  list("var", variables);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    s << "  v" << i << " = ";
    switch (op.kind) {
      case OpKind::kUnary:
        s << kUnaryNames[op.code] << "(" << operand_string(op.a);
        if (op.code == 5) s << ", " << op.alpha;
        s << ")";
        break;
      case OpKind::kBinary:
        s << kBinaryNames[op.code] << "(" << operand_string(op.a) << ", " << operand_string(op.b)
          << ")";
        break;
      case OpKind::kBias:
        s << "add(" << operand_string(op.a) << ", " << operand_string(op.b) << ")";
        break;
      case OpKind::kMatmul:
        s << "matmul(" << operand_string(op.a) << ", " << operand_string(op.b) << ")";
        break;
      case OpKind::kDense:
        s << "dense(" << operand_string(op.a) << ", " << operand_string(op.b) << ", "
          << operand_string(op.c) << (op.code ? ", relu" : "") << ")";
        break;
      case OpKind::kRelayout:
        s << "relayout(" << operand_string(op.a) << ", " << op.layout->short_string() << ")";
        break;
      case OpKind::kRowScale:
        s << "mul(" << operand_string(op.a) << ", reduce_sum(" << operand_string(op.a)
          << ", {1}, keepdims))";
        break;
      case OpKind::kSoftmax:
        s << "softmax(" << operand_string(op.a) << ", 1)";
        break;
      case OpKind::kCenter:
        s << "sub(" << operand_string(op.a) << ", reduce_mean(" << operand_string(op.a)
          << ", {0}, keepdims))";
        break;
      case OpKind::kWhere:
        s << "where(greater(" << operand_string(op.a) << ", " << operand_string(op.b) << "), "
          << operand_string(op.a) << ", scale(" << operand_string(op.b) << ", 0.5))";
        break;
      case OpKind::kLayerNorm:
        s << "layer_norm(" << operand_string(op.a) << ", " << operand_string(op.b) << ", "
          << operand_string(op.c) << ")";
        break;
      case OpKind::kDropout:
        s << "dropout(" << operand_string(op.a) << ", " << op.alpha << ", seeds.next())";
        break;
      case OpKind::kTranspose:
        s << "transpose(" << operand_string(op.a) << ", {1, 0})";
        break;
    }
    s << "\n";
  }
  s << "  outputs:";
  for (int o : outputs) s << " v" << o;
  const char* training[] = {"none", "gradients", "sgd", "sgd+momentum", "adam"};
  s << "\n  training: " << training[static_cast<int>(this->training)];
  if (!watched_arguments.empty()) {
    s << ", watching";
    for (int a : watched_arguments) s << " arg" << a;
  }
  return s.str();
}

class Generator {
 public:
  Generator(const Mesh& mesh, uint64_t seed) : mesh_(mesh), rng_(seed) {
    for (int64_t rank = 0; rank <= 2; ++rank) {
      layouts_[rank] = all_layouts(mesh, rank, /*with_partial=*/true);
      for (const Layout& l : layouts_[rank]) {
        if (!l.is_partial()) plain_layouts_[rank].push_back(l);
      }
    }
  }

  StepSpec step() {
    StepSpec s;
    // Sizes 1..9: uneven over mesh dims of 2, 4 and 8, and smaller than them; now and then
    // larger ones, whose fused segments run in several blocks.
    s.m = chance(0.05) ? uniform(10, 70) : uniform(1, 9);
    s.n = chance(0.05) ? uniform(10, 70) : uniform(1, 9);
    // Activations come first so that every step has one.
    s.arguments.push_back(source(kActivation, true, s));
    for (int64_t i = uniform(0, 3); i > 0; --i) s.arguments.push_back(source(any_kind(), true, s));
    for (int64_t i = uniform(0, 2); i > 0; --i) s.constants.push_back(source(any_kind(), true, s));
    for (int64_t i = uniform(0, 2); i > 0; --i) s.variables.push_back(source(any_kind(), false, s));
    const int64_t count = uniform(1, 7);
    for (int64_t i = 0; i < count; ++i) s.ops.push_back(op(s, static_cast<int>(i)));
    for (int i = 0; i + 1 < static_cast<int>(s.ops.size()); ++i) {
      if (chance(0.3)) s.outputs.push_back(i);
    }
    s.outputs.push_back(static_cast<int>(s.ops.size()) - 1);
    s.training = static_cast<Training>(uniform(0, 4));
    if (s.training != Training::kNone) {
      for (size_t a = 1; a < s.arguments.size(); ++a) {
        if (chance(0.5)) s.watched_arguments.push_back(static_cast<int>(a));
      }
    }
    return s;
  }

  // The alias plan of one call: the trace call aliases often, replays sometimes.
  std::vector<Alias> aliases(const StepSpec& s, bool trace) {
    std::vector<Alias> plan(s.arguments.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      if (!chance(trace ? 0.5 : 0.15)) continue;
      std::vector<Alias> options;
      auto same = [&](const Source& x) {
        return x.kind == s.arguments[i].kind && x.layout == s.arguments[i].layout;
      };
      for (size_t j = 0; j < i; ++j) {
        if (same(s.arguments[j])) options.push_back({Alias::kArgument, static_cast<int>(j)});
      }
      for (size_t j = 0; j < s.constants.size(); ++j) {
        if (same(s.constants[j])) options.push_back({Alias::kConstant, static_cast<int>(j)});
      }
      for (size_t j = 0; j < s.variables.size(); ++j) {
        if (same(s.variables[j])) options.push_back({Alias::kVariable, static_cast<int>(j)});
      }
      if (!options.empty()) plan[i] = options[static_cast<size_t>(uniform(0, options.size() - 1))];
    }
    return plan;
  }

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, static_cast<int64_t>(hi))(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  uint64_t seed() { return rng_(); }

 private:
  Kind any_kind() { return static_cast<Kind>(uniform(0, kNumKinds - 1)); }

  const Layout& pick(const std::vector<Layout>& layouts) {
    return layouts[static_cast<size_t>(uniform(0, static_cast<int64_t>(layouts.size()) - 1))];
  }

  // A source of `kind`; half of the time with the layout of an earlier one of its kind, so that
  // calls can alias them.
  Source source(Kind kind, bool partial, const StepSpec& s) {
    const int64_t rank = kind == kBias ? 1 : 2;
    std::vector<const Source*> earlier;
    for (const auto* list : {&s.arguments, &s.constants, &s.variables}) {
      for (const Source& x : *list) {
        if (x.kind == kind && (partial || !x.layout.is_partial())) earlier.push_back(&x);
      }
    }
    if (!earlier.empty() && chance(0.5)) {
      return {kind, earlier[static_cast<size_t>(uniform(0, earlier.size() - 1))]->layout};
    }
    return {kind, pick(partial ? layouts_[rank] : plain_layouts_[rank])};
  }

  Operand operand(const StepSpec& s, Kind kind, int results) {
    std::vector<Operand> options;
    auto add = [&](From from, const std::vector<Source>& sources) {
      for (size_t i = 0; i < sources.size(); ++i) {
        if (sources[i].kind == kind) options.push_back({from, static_cast<int>(i)});
      }
    };
    add(From::kArgument, s.arguments);
    add(From::kConstant, s.constants);
    add(From::kVariable, s.variables);
    if (kind == kActivation) {
      // Recent results are likelier: chains rather than fans.
      for (int r = 0; r < results; ++r) options.push_back({From::kResult, r});
      if (results > 0 && chance(0.6)) return {From::kResult, results - 1};
    }
    if (options.empty()) return {From::kResult, -1};  // none: the caller picks another op
    return options[static_cast<size_t>(uniform(0, options.size() - 1))];
  }

  Op op(const StepSpec& s, int results) {
    for (;;) {
      Op op;
      op.kind = static_cast<OpKind>(uniform(0, kNumOpKinds - 1));
      op.a = operand(s, kActivation, results);
      switch (op.kind) {
        case OpKind::kUnary:
          op.code = static_cast<int>(uniform(0, 6));
          op.alpha = static_cast<double>(uniform(-3, 3)) / 2.0;
          return op;
        case OpKind::kBinary:
          op.code = static_cast<int>(uniform(0, 4));
          op.b = operand(s, kActivation, results);
          return op;
        case OpKind::kBias:
          op.b = operand(s, kBias, results);
          if (op.b.index < 0) continue;
          return op;
        case OpKind::kMatmul:
          op.b = operand(s, kWeight, results);
          if (op.b.index < 0) continue;
          return op;
        case OpKind::kDense:
          op.code = static_cast<int>(uniform(0, 1));
          op.b = operand(s, kWeight, results);
          op.c = operand(s, kBias, results);
          if (op.b.index < 0 || op.c.index < 0) continue;
          return op;
        case OpKind::kRelayout:
          op.layout = pick(layouts_[2]);
          return op;
        case OpKind::kWhere:
          op.b = operand(s, kActivation, results);
          return op;
        case OpKind::kLayerNorm:
          op.b = operand(s, kBias, results);
          op.c = operand(s, kBias, results);
          if (op.b.index < 0 || op.c.index < 0) continue;
          return op;
        case OpKind::kDropout:
          op.alpha = static_cast<double>(uniform(1, 3)) / 4.0;
          return op;
        case OpKind::kTranspose:
          if (s.m != s.n) continue;  // every activation stays [m, n]
          return op;
        case OpKind::kRowScale:
        case OpKind::kSoftmax:
        case OpKind::kCenter:
          return op;
      }
    }
  }

  Mesh mesh_;
  std::mt19937_64 rng_;
  std::vector<Layout> layouts_[3];
  std::vector<Layout> plain_layouts_[3];
};

// ---- Running it ---------------------------------------------------------------------------------

// Random values of `source`'s kind and layout (partial ones with non-trivial terms).
DTensor random_value(const Source& source, int64_t m, int64_t n, uint64_t seed) {
  const Shape shape = shape_of(source.kind, m, n);
  Tensor global = Tensor::empty(shape, DType::kF32);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* data = global.data<float>();
  for (int64_t i = 0; i < global.num_elements(); ++i) data[i] = dist(rng);
  return dtensor::testing::distribute_with_terms(global, source.layout, seed + 1);
}

// What one side (eager or captured) runs the step with.
struct Side {
  std::vector<DVariable> variables;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<SeedGenerator> seeds;  // dropout's
};

std::unique_ptr<Optimizer> make_optimizer(Training t) {
  switch (t) {
    case Training::kSgd:
      return std::make_unique<SGD>(0.1);
    case Training::kMomentum:
      return std::make_unique<SGD>(0.1, 0.9);
    case Training::kAdam:
      return std::make_unique<Adam>(0.01);
    default:
      return nullptr;
  }
}

std::vector<DTensor> run_step(const StepSpec& s, const std::vector<DTensor>& constants, Side& side,
                              const std::vector<DTensor>& args) {
  std::optional<GradientTape> tape;
  if (s.training != Training::kNone) {
    tape.emplace();
    for (const DVariable& v : side.variables) tape->watch(v);
    for (int a : s.watched_arguments) tape->watch(args[static_cast<size_t>(a)]);
  }
  std::vector<DTensor> results;
  auto value = [&](const Operand& o) -> DTensor {
    switch (o.from) {
      case From::kArgument:
        return args[static_cast<size_t>(o.index)];
      case From::kConstant:
        return constants[static_cast<size_t>(o.index)];
      case From::kVariable:
        return side.variables[static_cast<size_t>(o.index)].value();
      default:
        return results[static_cast<size_t>(o.index)];
    }
  };
  for (const Op& op : s.ops) {
    const DTensor a = value(op.a);
    switch (op.kind) {
      case OpKind::kUnary: {
        static DTensor (*const unary[])(const DTensor&) = {relu, neg, tanh, sigmoid, abs};
        if (op.code < 5) {
          results.push_back(unary[op.code](a));
        } else if (op.code == 5) {
          results.push_back(scale(a, op.alpha));
        } else {
          results.push_back(gelu(a));
        }
        break;
      }
      case OpKind::kBinary: {
        static DTensor (*const binary[])(const DTensor&, const DTensor&) = {add, sub, mul, maximum,
                                                                            minimum};
        results.push_back(binary[op.code](a, value(op.b)));
        break;
      }
      case OpKind::kBias:
        results.push_back(add(a, value(op.b)));
        break;
      case OpKind::kMatmul:
        results.push_back(matmul(a, value(op.b)));
        break;
      case OpKind::kDense:
        results.push_back(dense(a, value(op.b), value(op.c),
                                op.code ? DenseActivation::kRelu : DenseActivation::kNone));
        break;
      case OpKind::kRelayout:
        results.push_back(traced_relayout(a, *op.layout));
        break;
      case OpKind::kRowScale:
        results.push_back(mul(a, reduce_sum(a, {1}, /*keepdims=*/true)));
        break;
      case OpKind::kSoftmax:
        results.push_back(softmax(a, 1));
        break;
      case OpKind::kCenter:
        results.push_back(sub(a, reduce_mean(a, {0}, /*keepdims=*/true)));
        break;
      case OpKind::kWhere: {
        const DTensor b = value(op.b);
        results.push_back(where(greater(a, b), a, scale(b, 0.5)));
        break;
      }
      case OpKind::kLayerNorm:
        results.push_back(layer_norm(a, value(op.b), value(op.c)));
        break;
      case OpKind::kDropout:
        results.push_back(dropout(a, op.alpha, side.seeds->next()));
        break;
      case OpKind::kTranspose:
        results.push_back(transpose(a, {1, 0}));
        break;
    }
  }
  std::vector<DTensor> out;
  for (int o : s.outputs) out.push_back(results[static_cast<size_t>(o)]);
  if (!tape) return out;
  // Every variable takes part in the loss, so that each has a gradient.
  DTensor loss = reduce_sum(results.back());
  for (const DVariable& v : side.variables) {
    const DTensor x = v.value();
    loss = add(loss, scale(reduce_sum(mul(x, x)), 0.01));
  }
  out.push_back(loss);
  if (!s.watched_arguments.empty()) {
    std::vector<DTensor> sources;
    for (int a : s.watched_arguments) sources.push_back(args[static_cast<size_t>(a)]);
    std::vector<DTensor> grads = tape->gradient(loss, sources);
    out.insert(out.end(), grads.begin(), grads.end());
  }
  if (!side.variables.empty()) {
    std::vector<DTensor> grads = tape->gradient(loss, side.variables);
    if (side.optimizer) side.optimizer->apply(side.variables, grads);
    out.insert(out.end(), grads.begin(), grads.end());
  }
  return out;
}

struct Tally {
  int64_t steps = 0;    // calls compared
  int64_t cases = 0;    // steps traced
  int64_t skipped = 0;  // cases eager rejects (no sharding rule for a layout, ...)
  int64_t refused = 0;  // replays refused because the values overturn a traced layout choice
  int64_t differences = 0;
  int64_t first_difference = -1;  // steps run when the first one was found
};

std::string alias_string(const std::vector<Alias>& plan) {
  std::string s;
  for (size_t i = 0; i < plan.size(); ++i) {
    const char* what[] = {"fresh", "arg", "const", "var"};
    s += " arg" + std::to_string(i) + "=" + what[plan[i].mode];
    if (plan[i].mode != Alias::kFresh) s += std::to_string(plan[i].index);
  }
  return s;
}

// The first way `captured` differs from `eager`, or "".
std::string compare(const std::vector<DTensor>& eager, const std::vector<DTensor>& captured,
                    const Side& e, const Side& c) {
  if (eager.size() != captured.size()) return "a different number of outputs";
  for (size_t i = 0; i < eager.size(); ++i) {
    if (!same_bits(eager[i], captured[i])) {
      std::string what = "output " + std::to_string(i) + ": eager " + eager[i].short_string() +
                         ", captured " + captured[i].short_string();
      for (size_t d = 0; d < captured[i].shards().size(); ++d) {
        if (captured[i].shards()[d].shape() != eager[i].shards()[d].shape()) {
          what += ", shard " + std::to_string(d) + " of shape " +
                  shape_to_string(captured[i].shards()[d].shape()) + " for " +
                  shape_to_string(eager[i].shards()[d].shape());
          break;
        }
      }
      return what;
    }
  }
  for (size_t v = 0; v < e.variables.size(); ++v) {
    if (!same_bits(e.variables[v].value(), c.variables[v].value())) {
      return "variable " + std::to_string(v) + " after the step";
    }
  }
  return "";
}

// Runs one case: a trace and `calls - 1` replays, each against eager.
void run_case(const Mesh& mesh, uint64_t base_seed, int64_t index, int calls, Tally& tally) {
  const uint64_t case_seed = base_seed * 1000003u + static_cast<uint64_t>(index);
  Generator gen(mesh, case_seed);
  const StepSpec spec = gen.step();
  std::vector<DTensor> constants;
  for (const Source& c : spec.constants)
    constants.push_back(random_value(c, spec.m, spec.n, gen.seed()));
  Side eager, captured;
  for (const Source& v : spec.variables) {
    Source plain = v;
    const DTensor init = random_value(plain, spec.m, spec.n, gen.seed());
    eager.variables.emplace_back(init);
    captured.variables.emplace_back(dtensor::testing::deep_copy(init));
  }
  eager.optimizer = make_optimizer(spec.training);
  captured.optimizer = make_optimizer(spec.training);
  const int64_t seeds_from = static_cast<int64_t>(gen.seed() % 1000000);
  eager.seeds = std::make_unique<SeedGenerator>(mesh, seeds_from);
  captured.seeds = std::make_unique<SeedGenerator>(mesh, seeds_from);
  Function f = function(
      [&](const std::vector<DTensor>& args) { return run_step(spec, constants, captured, args); });
  ++tally.cases;
  std::vector<Alias> trace_plan;
  for (int call = 0; call < calls; ++call) {
    const std::vector<Alias> plan = gen.aliases(spec, call == 0);
    if (call == 0) trace_plan = plan;
    std::vector<DTensor> eager_args, captured_args;
    for (size_t i = 0; i < spec.arguments.size(); ++i) {
      const Alias& a = plan[i];
      switch (a.mode) {
        case Alias::kFresh: {
          DTensor x = random_value(spec.arguments[i], spec.m, spec.n, gen.seed());
          eager_args.push_back(x);
          captured_args.push_back(x);
          break;
        }
        case Alias::kArgument:
          eager_args.push_back(eager_args[static_cast<size_t>(a.index)]);
          captured_args.push_back(captured_args[static_cast<size_t>(a.index)]);
          break;
        case Alias::kConstant:
          eager_args.push_back(constants[static_cast<size_t>(a.index)]);
          captured_args.push_back(constants[static_cast<size_t>(a.index)]);
          break;
        case Alias::kVariable:
          eager_args.push_back(eager.variables[static_cast<size_t>(a.index)].value());
          captured_args.push_back(captured.variables[static_cast<size_t>(a.index)].value());
          break;
      }
    }
    // Inside a captured step every argument is a value of its own, for gradient tapes too
    // (capture/function.h): eager runs the step on fresh handles likewise.
    for (DTensor& a : eager_args) {
      a = DTensor::from_trusted_shards(a.shape(), a.dtype(), a.layout(), a.shards());
    }
    std::vector<DTensor> want;
    std::string eager_error;
    try {
      want = run_step(spec, constants, eager, eager_args);
    } catch (const Error& e) {
      if (call == 0) {
        ++tally.skipped;  // a step eager rejects is not a step to capture
        return;
      }
      eager_error = e.what();
    }
    std::string difference;
    try {
      std::vector<DTensor> got = f(captured_args);
      difference = eager_error.empty() ? compare(want, got, eager, captured)
                                       : "eager threw " + eager_error + ", the replay did not";
    } catch (const UnimplementedError& e) {
      // A layout choice the trace made from values (a partial sum through mul) that the values
      // now overturn: a documented refusal (capture/function.h), not a wrong result.
      if (std::string(e.what()).find("the values now call for the other choice") !=
          std::string::npos) {
        ++tally.steps;
        ++tally.refused;
        return;
      }
      difference = std::string("the captured step threw: ") + e.what();
    } catch (const std::exception& e) {
      if (eager_error != e.what()) difference = std::string("the captured step threw: ") + e.what();
    }
    ++tally.steps;
    if (difference.empty()) continue;
    ++tally.differences;
    if (tally.first_difference < 0) tally.first_difference = tally.steps;
    if (tally.differences <= 3) {
      std::printf(
          "DIFFERENCE on mesh %s, seed %llu, case %lld (DTENSOR_CAPTURE_DIFF_CASE=%lld), call %d "
          "(%s), after %lld steps: %s\narguments of the trace:%s\narguments of this call:%s\n"
          "step:\n%s\n\n",
          mesh.dims_string().c_str(), static_cast<unsigned long long>(base_seed),
          static_cast<long long>(index), static_cast<long long>(index), call,
          call == 0 ? "trace" : "replay", static_cast<long long>(tally.steps), difference.c_str(),
          alias_string(trace_plan).c_str(), alias_string(plan).c_str(), spec.describe().c_str());
      std::fflush(stdout);
    }
    return;  // the two sides' variables may have parted: the case says no more
  }
}

std::vector<Mesh> differential_meshes() {
  std::vector<Mesh> meshes{test_mesh({{"batch", 1}})};
  for (const Mesh& m : dtensor::testing::standard_meshes()) meshes.push_back(m);
  return meshes;
}

}  // namespace

TEST_CASE("random captured steps replay eager's bits on every test mesh") {
  const int64_t steps_per_mesh = env_int("DTENSOR_CAPTURE_DIFF_STEPS", 10000);
  const uint64_t seed = static_cast<uint64_t>(env_int("DTENSOR_CAPTURE_DIFF_SEED", 25));
  const int64_t only = env_int("DTENSOR_CAPTURE_DIFF_CASE", -1);
  const int64_t shards = env_int("TEST_TOTAL_SHARDS", 1);
  const int64_t shard = env_int("TEST_SHARD_INDEX", 0);
  if (const char* status = std::getenv("TEST_SHARD_STATUS_FILE")) std::ofstream touch(status);
  constexpr int kCallsPerCase = 6;  // one trace, five replays
  for (const Mesh& mesh : differential_meshes()) {
    Tally tally;
    const auto start = std::chrono::steady_clock::now();
    if (only >= 0) {
      run_case(mesh, seed, only, kCallsPerCase, tally);
    } else {
      for (int64_t index = shard; tally.steps < steps_per_mesh / shards; index += shards) {
        run_case(mesh, seed, index, kCallsPerCase, tally);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "mesh %s: %lld steps in %lld cases (%lld skipped: eager rejects them; %lld replays "
        "refused: values overturn a traced layout choice), %lld differences (first after %lld "
        "steps), %.1f s\n",
        mesh.dims_string().c_str(), static_cast<long long>(tally.steps),
        static_cast<long long>(tally.cases), static_cast<long long>(tally.skipped),
        static_cast<long long>(tally.refused), static_cast<long long>(tally.differences),
        static_cast<long long>(tally.first_difference), seconds);
    std::fflush(stdout);
    INFO("mesh " << mesh.dims_string());
    CHECK(tally.differences == 0);
  }
}
