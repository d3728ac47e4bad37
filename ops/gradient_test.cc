// Gradients of every public op, from a table of op descriptors rather than a hand-picked list:
//   - every function declared in ops/ops.h (read as test data) has at least one descriptor, so an
//     op added without one fails here;
//   - each differentiable op's VJP matches f64 central finite differences on one device;
//   - each differentiable op's gradient on sharded layouts (batch=8, 2x4, 2x2x2 meshes; uneven
//     dims; partial float inputs) equals the single-device gradient;
//   - non-differentiable ops record nothing: a gradient past them is neither lost nor an error.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::distribute_with_terms;
using dtensor::testing::standard_meshes;

namespace {

using Fn = std::function<DTensor(const std::vector<DTensor>&)>;
using Rng = std::mt19937_64;

// One way of calling a public op: `inputs` builds its (global) inputs, `f` applies it. The float
// inputs are the ones differentiated; integer and bool inputs are data.
struct OpCase {
  std::string op;  // the function's name in ops/ops.h
  std::string label;
  bool differentiable;
  std::function<std::vector<Tensor>(Rng&)> inputs;
  Fn f;
  double fd_step = 1e-6;
  double fd_tolerance = 1e-6;
};

Tensor uniform(const Shape& shape, Rng& rng, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = d(rng);
  return t;
}

// Values in [lo, hi] with random signs: away from the kinks of abs, relu, maximum at 0.
Tensor signed_away_from_zero(const Shape& shape, Rng& rng, double lo, double hi) {
  Tensor t = uniform(shape, rng, lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (rng() % 2) t.data<double>()[i] = -t.data<double>()[i];
  }
  return t;
}

Tensor integers(const Shape& shape, Rng& rng, int64_t below, DType dtype = DType::kI32) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int64_t v = static_cast<int64_t>(rng() % static_cast<uint64_t>(below));
    if (dtype == DType::kI32)
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
    else
      t.data<int64_t>()[i] = v;
  }
  return t;
}

Tensor booleans(const Shape& shape, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::kBool);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<bool>()[i] = rng() % 2 == 1;
  return t;
}

// Shapes: dims of 3, 5 and 6 are uneven on meshes of 2, 4 and 8 devices.
const Shape kX = {3, 5};

std::function<std::vector<Tensor>(Rng&)> one_input(Shape shape, double lo, double hi,
                                                   bool signed_values = true) {
  return [=](Rng& rng) {
    return std::vector<Tensor>{signed_values ? signed_away_from_zero(shape, rng, lo, hi)
                                             : uniform(shape, rng, lo, hi)};
  };
}

std::function<std::vector<Tensor>(Rng&)> two_inputs(Shape a, Shape b, double lo, double hi,
                                                    bool signed_values = true) {
  return [=](Rng& rng) {
    if (!signed_values)
      return std::vector<Tensor>{uniform(a, rng, lo, hi), uniform(b, rng, lo, hi)};
    return std::vector<Tensor>{signed_away_from_zero(a, rng, lo, hi),
                               signed_away_from_zero(b, rng, lo, hi)};
  };
}

void add_unary(std::vector<OpCase>& cases, const char* name, DTensor (*op)(const DTensor&),
               bool positive) {
  cases.push_back({name, name, true,
                   positive ? one_input(kX, 0.3, 2, false) : one_input(kX, 0.2, 2),
                   [op](const std::vector<DTensor>& v) { return op(v[0]); }});
}

void add_binary(std::vector<OpCase>& cases, const char* name,
                DTensor (*op)(const DTensor&, const DTensor&), bool differentiable, bool positive) {
  Fn f = [op](const std::vector<DTensor>& v) { return op(v[0], v[1]); };
  cases.push_back({name, std::string(name) + " [3,5] [5]", differentiable,
                   two_inputs(kX, {5}, positive ? 0.5 : 0.2, 2, !positive), f});
  cases.push_back({name, std::string(name) + " [3,1] [1,5]", differentiable,
                   two_inputs({3, 1}, {1, 5}, positive ? 0.5 : 0.2, 2, !positive), f});
}

// A layout on `x`'s mesh: its first dim on the mesh's first dim (used by traced_relayout).
Layout first_dim_sharded(const DTensor& x) {
  std::vector<std::string> specs(static_cast<size_t>(x.rank()), Layout::kUnsharded);
  specs[0] = x.mesh().dims()[0].name;
  return Layout(specs, x.mesh());
}

// The table: every public op of ops/ops.h, at least once.
const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    add_unary(c, "neg", neg, false);
    add_unary(c, "abs", dtensor::abs, false);
    add_unary(c, "exp", dtensor::exp, false);
    add_unary(c, "log", dtensor::log, true);
    add_unary(c, "sqrt", dtensor::sqrt, true);
    add_unary(c, "rsqrt", rsqrt, true);
    add_unary(c, "square", square, false);
    add_unary(c, "relu", relu, false);
    add_unary(c, "sigmoid", sigmoid, false);
    add_unary(c, "tanh", dtensor::tanh, false);
    add_unary(c, "gelu", gelu, false);
    c.push_back({"scale", "scale", true, one_input(kX, 0.2, 2),
                 [](const std::vector<DTensor>& v) { return scale(v[0], -1.5); }});

    add_binary(c, "add", add, true, false);
    add_binary(c, "sub", sub, true, false);
    add_binary(c, "mul", mul, true, false);
    add_binary(c, "div", dtensor::div, true, true);
    add_binary(c, "pow", dtensor::pow, true, true);
    add_binary(c, "maximum", maximum, true, false);
    add_binary(c, "minimum", minimum, true, false);
    add_binary(c, "equal", equal, false, false);
    add_binary(c, "not_equal", not_equal, false, false);
    add_binary(c, "less", less, false, false);
    add_binary(c, "less_equal", less_equal, false, false);
    add_binary(c, "greater", greater, false, false);
    add_binary(c, "greater_equal", greater_equal, false, false);
    c.push_back({"where", "where", true,
                 [](Rng& rng) {
                   return std::vector<Tensor>{booleans(kX, rng), uniform(kX, rng, -1, 1),
                                              uniform({5}, rng, -1, 1)};
                 },
                 [](const std::vector<DTensor>& v) { return where(v[0], v[1], v[2]); }});
    c.push_back(
        {"cast", "cast to the same dtype", true, one_input(kX, 0.2, 2),
         [](const std::vector<DTensor>& v) { return cast(cast(v[0], DType::kF64), DType::kF64); }});
    // Through f32: finite differences need a step far above f32's resolution.
    c.push_back(
        {"cast", "cast through f32", true, one_input(kX, 0.2, 2),
         [](const std::vector<DTensor>& v) { return cast(cast(v[0], DType::kF32), DType::kF64); },
         1e-2, 1e-4});
    c.push_back({"cast", "cast to int", false, one_input(kX, 0.2, 9),
                 [](const std::vector<DTensor>& v) { return cast(v[0], DType::kI32); }});

    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        c.push_back(
            {"matmul", std::string("matmul ") + (ta ? "T" : "N") + (tb ? "T" : "N"), true,
             two_inputs(ta ? Shape{4, 3} : Shape{3, 4}, tb ? Shape{5, 4} : Shape{4, 5}, 0.1, 1),
             [ta, tb](const std::vector<DTensor>& v) { return matmul(v[0], v[1], ta, tb); }});
      }
    }
    c.push_back({"matmul", "batched matmul", true, two_inputs({2, 3, 4}, {4, 5}, 0.1, 1),
                 [](const std::vector<DTensor>& v) { return matmul(v[0], v[1]); }});
    c.push_back({"dense", "dense relu", true,
                 [](Rng& rng) {
                   return std::vector<Tensor>{signed_away_from_zero({3, 4}, rng, 0.1, 1),
                                              signed_away_from_zero({4, 5}, rng, 0.1, 1),
                                              signed_away_from_zero({5}, rng, 0.1, 1)};
                 },
                 [](const std::vector<DTensor>& v) {
                   return dense(v[0], v[1], v[2], DenseActivation::kRelu);
                 }});
    c.push_back({"dense", "batched dense", true,
                 [](Rng& rng) {
                   return std::vector<Tensor>{signed_away_from_zero({2, 3, 4}, rng, 0.1, 1),
                                              signed_away_from_zero({4, 5}, rng, 0.1, 1),
                                              signed_away_from_zero({5}, rng, 0.1, 1)};
                 },
                 [](const std::vector<DTensor>& v) { return dense(v[0], v[1], v[2]); }});

    using Reduce = DTensor (*)(const DTensor&, std::vector<int64_t>, bool);
    const std::vector<std::pair<const char*, Reduce>> reductions = {{"reduce_sum", reduce_sum},
                                                                    {"reduce_mean", reduce_mean},
                                                                    {"reduce_max", reduce_max},
                                                                    {"reduce_min", reduce_min}};
    for (const auto& [name, op] : reductions) {
      Reduce r = op;
      c.push_back({name, std::string(name) + " axis 1", true, one_input({3, 6}, 0.1, 2),
                   [r](const std::vector<DTensor>& v) { return r(v[0], {1}, false); }});
      c.push_back({name, std::string(name) + " axis 0 keepdims", true, one_input({6, 3}, 0.1, 2),
                   [r](const std::vector<DTensor>& v) { return r(v[0], {0}, true); }});
      c.push_back({name, std::string(name) + " all", true, one_input(kX, 0.1, 2),
                   [r](const std::vector<DTensor>& v) { return r(v[0], {}, false); }});
    }
    c.push_back({"argmax", "argmax", false, one_input(kX, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return argmax(v[0], 1); }});

    c.push_back({"softmax", "softmax", true, one_input({3, 6}, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return softmax(v[0]); }});
    c.push_back({"softmax", "softmax axis 0", true, one_input({6, 3}, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return softmax(v[0], 0); }});
    c.push_back({"log_softmax", "log_softmax", true, one_input({3, 6}, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return log_softmax(v[0]); }});
    c.push_back({"logsumexp", "logsumexp", true, one_input({3, 6}, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return logsumexp(v[0]); }});
    c.push_back({"logsumexp", "logsumexp axis 0 keepdims", true, one_input({6, 3}, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return logsumexp(v[0], 0, true); }});
    c.push_back(
        {"sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy", true,
         [](Rng& rng) {
           return std::vector<Tensor>{signed_away_from_zero({6, 5}, rng, 0.1, 2),
                                      integers({6}, rng, 5)};
         },
         [](const std::vector<DTensor>& v) { return sparse_softmax_cross_entropy(v[0], v[1]); }});
    c.push_back({"one_hot", "one_hot", false,
                 [](Rng& rng) { return std::vector<Tensor>{integers({6}, rng, 5, DType::kI64)}; },
                 [](const std::vector<DTensor>& v) { return one_hot(v[0], 5, DType::kF64); }});

    c.push_back({"reshape", "reshape", true, one_input({6, 2, 3}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return reshape(v[0], {6, 6});
                 }});
    c.push_back({"reshape", "reshape merging", true, one_input({3, 2, 5}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return reshape(v[0], {-1, 5});
                 }});
    c.push_back({"broadcast_to", "broadcast_to", true, one_input({3, 1}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return broadcast_to(v[0], {2, 3, 5});
                 }});
    c.push_back({"traced_relayout", "traced_relayout", true, one_input({6, 5}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return traced_relayout(v[0], first_dim_sharded(v[0]));
                 }});
    c.push_back({"transpose", "transpose", true, one_input({3, 5, 2}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return transpose(v[0], {2, 0, 1});
                 }});
    c.push_back({"concat", "concat axis 0", true, two_inputs({3, 5}, {2, 5}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return concat({v[0], v[1]}, 0);
                 }});
    c.push_back({"concat", "concat axis 1", true, two_inputs({3, 5}, {3, 1}, 0.1, 2),
                 [](const std::vector<DTensor>& v) {
                   return concat({v[0], v[1]}, -1);
                 }});
    c.push_back(
        {"slice", "slice", true, one_input({5, 6}, 0.1, 2), [](const std::vector<DTensor>& v) {
           return slice(v[0], {1, 2}, {3, -1});
         }});
    c.push_back({"gather", "gather axis 0", true,
                 [](Rng& rng) {
                   return std::vector<Tensor>{uniform({5, 3}, rng, -1, 1), integers({6}, rng, 5)};
                 },
                 [](const std::vector<DTensor>& v) { return gather(v[0], v[1]); }});
    c.push_back({"gather", "gather axis 1", true,
                 [](Rng& rng) {
                   return std::vector<Tensor>{uniform({3, 5}, rng, -1, 1),
                                              integers({2, 3}, rng, 5, DType::kI64)};
                 },
                 [](const std::vector<DTensor>& v) { return gather(v[0], v[1], 1); }});
    c.push_back({"layer_norm", "layer_norm", true,
                 [](Rng& rng) {
                   return std::vector<Tensor>{uniform({6, 5}, rng, -2, 2),
                                              uniform({5}, rng, 0.5, 1.5),
                                              uniform({5}, rng, -1, 1)};
                 },
                 [](const std::vector<DTensor>& v) { return layer_norm(v[0], v[1], v[2], 1e-3); }});
    // Transformer ops: the random layouts shard the vocab, heads, sequence and model dims.
    c.push_back(
        {"embedding", "embedding", true,
         [](Rng& rng) {
           return std::vector<Tensor>{uniform({6, 3}, rng, -1, 1), integers({2, 5}, rng, 6)};
         },
         [](const std::vector<DTensor>& v) { return embedding(v[0], v[1]); }});
    c.push_back({"rms_norm", "rms_norm", true, two_inputs({6, 5}, {5}, 0.2, 2),
                 [](const std::vector<DTensor>& v) { return rms_norm(v[0], v[1], 1e-3); }});
    c.push_back({"rotary_embedding", "rotary_embedding", true, one_input({2, 5, 4}, 0.1, 2),
                 [](const std::vector<DTensor>& v) { return rotary_embedding(v[0], 100.0); }});
    // Attention, composed and fused: causal (query block of rank 4) and full (Tq != Tk).
    using Attention = DTensor (*)(const DTensor&, const DTensor&, const DTensor&, bool);
    for (const auto& [op, attend] :
         {std::pair<std::string, Attention>{"scaled_dot_product_attention",
                                            &scaled_dot_product_attention},
          {"fused_attention", &fused_attention}}) {
      for (const bool causal : {true, false}) {
        const Shape q = causal ? Shape{2, 3, 5, 4} : Shape{3, 2, 4};
        const Shape k = causal ? Shape{2, 3, 5, 4} : Shape{3, 5, 4};
        const Shape v = causal ? Shape{2, 3, 5, 2} : Shape{3, 5, 3};
        c.push_back({op, op + (causal ? " causal" : " full"), true,
                     [q, k, v](Rng& rng) {
                       return std::vector<Tensor>{uniform(q, rng, -1, 1), uniform(k, rng, -1, 1),
                                                  uniform(v, rng, -1, 1)};
                     },
                     [attend = attend, causal](const std::vector<DTensor>& x) {
                       return attend(x[0], x[1], x[2], causal);
                     }});
      }
    }
    // CNN ops: uneven batch, spatial and channel dims, each padding kind, strides, dilations,
    // groups.
    {
      Conv2dOptions same;
      same.strides = {2, 1};
      same.padding = {Padding2d::kSame};
      Conv2dOptions dilated;
      dilated.dilations = {2, 1};
      Conv2dOptions grouped;
      grouped.groups = 2;
      grouped.strides = {1, 2};
      grouped.padding = {Padding2d::kExplicit, 1, 0, 2, 1};
      c.push_back({"conv2d", "conv2d same stride 2x1", true,
                   two_inputs({3, 5, 4, 2}, {3, 2, 2, 3}, 0.1, 1),
                   [same](const std::vector<DTensor>& v) { return conv2d(v[0], v[1], same); }});
      c.push_back(
          {"conv2d", "conv2d valid dilation 2x1", true,
           two_inputs({2, 6, 3, 3}, {2, 2, 3, 5}, 0.1, 1),
           [dilated](const std::vector<DTensor>& v) { return conv2d(v[0], v[1], dilated); }});
      c.push_back(
          {"conv2d", "conv2d explicit groups 2", true,
           two_inputs({3, 4, 5, 4}, {2, 3, 2, 6}, 0.1, 1),
           [grouped](const std::vector<DTensor>& v) { return conv2d(v[0], v[1], grouped); }});
      c.push_back({"conv2d_backprop_input", "conv2d_backprop_input same", true,
                   two_inputs({3, 2, 2, 3}, {3, 3, 4, 3}, 0.1, 1),
                   [same](const std::vector<DTensor>& v) {
                     return conv2d_backprop_input({3, 5, 4, 2}, v[0], v[1], same);
                   }});
      c.push_back({"conv2d_backprop_input", "conv2d_backprop_input groups", true,
                   two_inputs({2, 3, 2, 6}, {3, 4, 3, 6}, 0.1, 1),
                   [grouped](const std::vector<DTensor>& v) {
                     return conv2d_backprop_input({3, 4, 5, 4}, v[0], v[1], grouped);
                   }});
      c.push_back({"conv2d_backprop_filter", "conv2d_backprop_filter same", true,
                   two_inputs({3, 5, 4, 2}, {3, 3, 4, 3}, 0.1, 1),
                   [same](const std::vector<DTensor>& v) {
                     return conv2d_backprop_filter(v[0], {3, 2, 2, 3}, v[1], same);
                   }});
      c.push_back({"conv2d_backprop_filter", "conv2d_backprop_filter groups", true,
                   two_inputs({3, 4, 5, 4}, {3, 4, 3, 6}, 0.1, 1),
                   [grouped](const std::vector<DTensor>& v) {
                     return conv2d_backprop_filter(v[0], {2, 3, 2, 6}, v[1], grouped);
                   }});
      Pool2dOptions pool_same;
      pool_same.window = {3, 2};
      pool_same.strides = {2, 2};
      pool_same.padding = {Padding2d::kSame};
      Pool2dOptions pool_valid;
      pool_valid.window = {2, 3};
      pool_valid.strides = {1, 2};
      c.push_back(
          {"max_pool2d", "max_pool2d same", true, one_input({3, 5, 6, 3}, 0.1, 2),
           [pool_same](const std::vector<DTensor>& v) { return max_pool2d(v[0], pool_same); }});
      c.push_back(
          {"max_pool2d", "max_pool2d valid", true, one_input({2, 4, 7, 5}, 0.1, 2),
           [pool_valid](const std::vector<DTensor>& v) { return max_pool2d(v[0], pool_valid); }});
      c.push_back(
          {"avg_pool2d", "avg_pool2d same", true, one_input({3, 5, 6, 3}, 0.1, 2),
           [pool_same](const std::vector<DTensor>& v) { return avg_pool2d(v[0], pool_same); }});
      c.push_back(
          {"avg_pool2d", "avg_pool2d valid", true, one_input({2, 4, 7, 5}, 0.1, 2),
           [pool_valid](const std::vector<DTensor>& v) { return avg_pool2d(v[0], pool_valid); }});
      c.push_back({"local_response_normalization", "local_response_normalization", true,
                   one_input({3, 2, 3, 6}, 0.1, 2), [](const std::vector<DTensor>& v) {
                     return local_response_normalization(v[0], 2, 1.0, 0.1, 0.75);
                   }});
      c.push_back({"local_response_normalization", "local_response_normalization beta 0.6", true,
                   one_input({2, 2, 2, 5}, 0.1, 2), [](const std::vector<DTensor>& v) {
                     return local_response_normalization(v[0], 1, 0.5, 0.3, 0.6);
                   }});
      c.push_back({"bias_add", "bias_add", true, two_inputs({3, 2, 5}, {5}, 0.1, 2),
                   [](const std::vector<DTensor>& v) { return bias_add(v[0], v[1]); }});
      c.push_back({"flatten", "flatten", true, one_input({3, 2, 5}, 0.1, 2),
                   [](const std::vector<DTensor>& v) { return flatten(v[0]); }});
      c.push_back({"dropout", "dropout", true, one_input({6, 5}, 0.1, 2),
                   [](const std::vector<DTensor>& v) { return dropout(v[0], 0.4, 99); }});
    }
    return c;
  }();
  return cases;
}

// The functions ops/ops.h declares: "<return type> name(" at the start of a line.
std::set<std::string> declared_ops() {
  std::ifstream in("ops/ops.h");
  REQUIRE(in.good());
  const std::regex declaration(R"(^(?:[A-Za-z_][\w:<>,]*[\s&*]+)+([A-Za-z_]\w*)\s*\()");
  std::set<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("//", 0) != 0 && std::regex_search(line, m, declaration)) names.insert(m[1]);
  }
  return names;
}

Mesh single_device() { return Mesh::create({{"d", 1}}, DeviceType::kCPU); }

std::vector<DTensor> on_one_device(const std::vector<Tensor>& inputs) {
  Mesh one = single_device();
  std::vector<DTensor> x;
  for (const Tensor& t : inputs) x.push_back(distribute(t, Layout::replicated(one, t.rank())));
  return x;
}

// sum(f(x) * weights) and its gradients for the float inputs (empty tensors for the others).
std::pair<double, std::vector<Tensor>> loss_and_gradients(const OpCase& c,
                                                          const std::vector<DTensor>& x,
                                                          const Tensor& weights) {
  GradientTape tape;
  for (const DTensor& t : x) {
    if (is_floating(t.dtype())) tape.watch(t);
  }
  DTensor y = c.f(x);
  DTensor w = distribute(weights, Layout::replicated(y.mesh(), y.rank()));
  DTensor loss = reduce_sum(mul(cast(y, DType::kF64), w));
  std::vector<DTensor> grads = tape.gradient(loss, x);
  std::vector<Tensor> out;
  for (size_t i = 0; i < x.size(); ++i)
    out.push_back(is_floating(x[i].dtype()) ? to_global(grads[i]) : Tensor());
  return {to_global(loss).data<double>()[0], out};
}

double loss_only(const OpCase& c, const std::vector<DTensor>& x, const Tensor& weights) {
  DTensor y = c.f(x);
  DTensor w = distribute(weights, Layout::replicated(y.mesh(), y.rank()));
  return to_global(reduce_sum(mul(cast(y, DType::kF64), w))).data<double>()[0];
}

Tensor weights_for(const OpCase& c, const std::vector<Tensor>& inputs, Rng& rng) {
  return uniform(c.f(on_one_device(inputs)).shape(), rng, -1, 1);
}

}  // namespace

TEST_CASE("every op declared in ops/ops.h has a gradient case") {
  std::set<std::string> listed;
  for (const OpCase& c : op_cases()) listed.insert(c.op);
  const std::set<std::string> declared = declared_ops();
  CHECK(declared.size() > 40);
  for (const std::string& name : declared) {
    INFO("ops/ops.h declares '" << name << "': add it to op_cases() in ops/gradient_test.cc");
    CHECK(listed.count(name) == 1);
  }
  for (const std::string& name : listed) {
    INFO("op_cases() lists '" << name << "', which ops/ops.h does not declare");
    CHECK(declared.count(name) == 1);
  }
}

TEST_CASE("every differentiable op's VJP matches f64 central finite differences") {
  Rng rng(11);
  for (const OpCase& c : op_cases()) {
    INFO(c.label);
    const std::vector<Tensor> inputs = c.inputs(rng);
    const std::vector<DTensor> x = on_one_device(inputs);
    if (!c.differentiable) continue;
    CHECK(is_floating(c.f(x).dtype()));
    const Tensor weights = weights_for(c, inputs, rng);
    const std::vector<Tensor> grads = loss_and_gradients(c, x, weights).second;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!is_floating(inputs[i].dtype())) continue;
      REQUIRE(grads[i].shape() == inputs[i].shape());
      for (int64_t e = 0; e < inputs[i].num_elements(); ++e) {
        auto shifted = [&](double delta) {
          Tensor t = inputs[i].clone();
          t.data<double>()[e] += delta;
          std::vector<DTensor> xs = x;
          xs[i] = on_one_device({t})[0];
          return loss_only(c, xs, weights);
        };
        const double numeric = (shifted(c.fd_step) - shifted(-c.fd_step)) / (2 * c.fd_step);
        INFO("input " << i << " element " << e);
        CHECK(grads[i].data<double>()[e] ==
              Approx(numeric).epsilon(c.fd_tolerance).margin(c.fd_tolerance));
      }
    }
  }
}

TEST_CASE("every differentiable op's sharded gradient equals the single-device gradient") {
  Rng rng(12);
  std::vector<Mesh> meshes = standard_meshes();
  meshes.push_back(dtensor::testing::test_mesh({{"x", 3}}));  // 3 devices: uneven everywhere
  int compared = 0;
  for (const OpCase& c : op_cases()) {
    if (!c.differentiable) continue;
    const std::vector<Tensor> inputs = c.inputs(rng);
    const Tensor weights = weights_for(c, inputs, rng);
    const std::vector<Tensor> want = loss_and_gradients(c, on_one_device(inputs), weights).second;
    for (const Mesh& mesh : meshes) {
      std::vector<std::vector<Layout>> choices;
      for (const Tensor& t : inputs)
        choices.push_back(all_layouts(mesh, t.rank(), /*with_partial=*/is_floating(t.dtype())));
      for (int sample = 0; sample < 20; ++sample) {
        std::vector<DTensor> x;
        std::string described;
        for (size_t i = 0; i < inputs.size(); ++i) {
          const Layout& l = choices[i][rng() % choices[i].size()];
          x.push_back(distribute_with_terms(inputs[i], l, rng()));
          described += " " + l.short_string();
        }
        INFO(c.label << " on " << mesh.dims_string() << " with inputs" << described);
        const std::vector<Tensor> got = loss_and_gradients(c, x, weights).second;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!is_floating(inputs[i].dtype())) continue;
          INFO("gradient of input " << i);
          REQUIRE(got[i].shape() == want[i].shape());
          for (int64_t e = 0; e < got[i].num_elements(); ++e) {
            INFO("element " << e);
            REQUIRE(got[i].data<double>()[e] ==
                    Approx(want[i].data<double>()[e]).epsilon(1e-9).margin(1e-12));
          }
        }
        ++compared;
      }
    }
  }
  CHECK(compared > 4000);
}

TEST_CASE("non-differentiable ops record nothing and pass the other gradients") {
  Rng rng(13);
  for (const OpCase& c : op_cases()) {
    if (c.differentiable) continue;
    INFO(c.label);
    const std::vector<Tensor> inputs = c.inputs(rng);
    const std::vector<DTensor> x = on_one_device(inputs);
    GradientTape tape;
    std::vector<DTensor> sources;
    for (const DTensor& t : x) {
      if (is_floating(t.dtype())) {
        tape.watch(t);
        sources.push_back(t);
      }
    }
    DTensor y = c.f(x);
    // loss = sum(cast(op(x))) + sum(sources): only the direct terms have a gradient, ones.
    DTensor loss = reduce_sum(cast(y, DType::kF64));
    for (const DTensor& s : sources) loss = add(loss, reduce_sum(s));
    std::vector<DTensor> grads;
    REQUIRE_NOTHROW(grads = tape.gradient(loss, sources));
    for (const DTensor& g : grads) {
      Tensor t = to_global(g);
      for (int64_t e = 0; e < t.num_elements(); ++e) CHECK(t.data<double>()[e] == 1.0);
    }
  }
}
