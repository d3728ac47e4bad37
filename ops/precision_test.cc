// The precision policy: which ops run in bf16 under mixed_bfloat16 and which stay f32, the dtypes
// of variables and gradients, the gradient reduction dtype, sharded meshes against one device,
// and the policy's scoping and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;

namespace {

// Values with more bits than bf16 keeps: an op that ran in bf16 gives other bits than in f32.
Tensor values(const Shape& shape, uint64_t seed) { return testing::uniform_f32(shape, seed); }

std::vector<float> floats(const DTensor& x) {
  const Tensor g = to_global(x);
  REQUIRE(g.dtype() == DType::kF32);
  return std::vector<float>(g.data<float>(), g.data<float>() + g.num_elements());
}

bool same_values(const DTensor& a, const DTensor& b) {
  const std::vector<float> fa = floats(a), fb = floats(b);
  return fa.size() == fb.size() && std::memcmp(fa.data(), fb.data(), fa.size() * 4) == 0;
}

// Whether every element is a bf16 value (its low 16 bits zero): the result of a bf16 rounding.
bool all_bf16_values(const DTensor& x) {
  for (float f : floats(x)) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0xffffu) != 0) return false;
  }
  return true;
}

// One dense layer and a cross-entropy loss on [16, 24] inputs, 8 classes.
struct Problem {
  Mesh mesh;
  DTensor x, labels;
  DVariable w, b;

  explicit Problem(const std::string& mesh_spec)
      : mesh(Mesh::create(parse_mesh_dims(mesh_spec), DeviceType::kCPU)),
        x(distribute(values({16, 24}, 1), Layout::batch_sharded(mesh, "batch", 2))),
        labels(cast(random_uniform({16}, Layout::batch_sharded(mesh, "batch", 1), 2, 0, 8),
                    DType::kI32)),
        w(distribute(values({24, 8}, 3), Layout::replicated(mesh, 2)), "w"),
        b(distribute(values({8}, 4), Layout::replicated(mesh, 1)), "b") {}

  DTensor loss() {
    return reduce_mean(sparse_softmax_cross_entropy(
        dense(x, w.value(), b.value(), DenseActivation::kRelu), labels));
  }

  std::vector<DTensor> gradients() {
    GradientTape tape;
    tape.watch(w);
    tape.watch(b);
    return tape.gradient(loss(), std::vector<DVariable>{w, b});
  }
};

void require_close(const DTensor& a, const DTensor& b, double tolerance) {
  const std::vector<float> fa = floats(a), fb = floats(b);
  REQUIRE(fa.size() == fb.size());
  for (size_t i = 0; i < fa.size(); ++i) {
    INFO("element " << i << ": " << fa[i] << " vs " << fb[i]);
    REQUIRE(std::abs(fa[i] - fb[i]) <= tolerance * (1.0 + std::abs(fb[i])));
  }
}

}  // namespace

TEST_CASE("policies have names, and unknown names are rejected", "[precision]") {
  CHECK(Policy::float32().name() == "float32");
  CHECK(Policy::mixed_bfloat16().name() == "mixed_bfloat16");
  CHECK(Policy::mixed_bfloat16().with_bf16_gradient_reduction().name() ==
        "mixed_bfloat16+bf16_gradient_reduction");
  CHECK(Policy::from_name("mixed_bfloat16") == Policy::mixed_bfloat16());
  CHECK(Policy::mixed_bfloat16().compute_dtype() == DType::kBF16);
  CHECK(Policy::mixed_bfloat16().variable_dtype() == DType::kF32);
  CHECK(Policy::mixed_bfloat16().gradient_reduction_dtype() == DType::kF32);
  CHECK_THROWS_MATCHES(Policy::from_name("float16"), InvalidArgumentError,
                       Message("[Policy::from_name] unknown precision policy 'float16' (float32 "
                               "or mixed_bfloat16)"));
}

TEST_CASE("a policy scope is per thread, nests and restores", "[precision]") {
  CHECK(current_policy() == Policy::float32());
  {
    PolicyScope outer(Policy::mixed_bfloat16());
    CHECK(current_policy() == Policy::mixed_bfloat16());
    Policy seen_elsewhere = Policy::mixed_bfloat16();
    std::thread([&] { seen_elsewhere = current_policy(); }).join();
    CHECK(seen_elsewhere == Policy::float32());
    {
      PolicyScope inner(Policy::float32());
      CHECK(current_policy() == Policy::float32());
    }
    CHECK(current_policy() == Policy::mixed_bfloat16());
  }
  CHECK(current_policy() == Policy::float32());
}

TEST_CASE("mixed_bfloat16 runs matmul, dense and conv2d in bf16 and returns f32", "[precision]") {
  // matmul, dense and conv2d return the f32 accumulator of the bf16 products: rounded to bf16, it
  // is the explicit bf16 computation's result; the bias and ReLU are applied to it in f32.
  const Mesh mesh = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  const DTensor x = distribute(values({6, 10}, 5), Layout::replicated(mesh, 2));
  const DTensor w = distribute(values({10, 7}, 6), Layout::replicated(mesh, 2));
  const DTensor b = distribute(values({7}, 7), Layout::replicated(mesh, 1));
  const DTensor img = distribute(values({2, 5, 5, 3}, 8), Layout::replicated(mesh, 4));
  const DTensor filter = distribute(values({3, 3, 3, 4}, 9), Layout::replicated(mesh, 4));
  auto bf = [](const DTensor& t) { return cast(t, DType::kBF16); };
  const DTensor f32_matmul = matmul(x, w), f32_dense = dense(x, w, b, DenseActivation::kRelu);
  const DTensor f32_conv = conv2d(img, filter);
  PolicyScope mixed(Policy::mixed_bfloat16());
  const DTensor y_matmul = matmul(x, w), y_dense = dense(x, w, b, DenseActivation::kRelu);
  const DTensor y_conv = conv2d(img, filter);
  for (const DTensor* y : {&y_matmul, &y_dense, &y_conv}) CHECK(y->dtype() == DType::kF32);
  // The bits of the explicit bf16 computation, not those of the f32 one.
  auto rounded = [&](const DTensor& t) { return cast(bf(t), DType::kF32); };
  CHECK(same_values(rounded(y_matmul), cast(matmul(bf(x), bf(w)), DType::kF32)));
  CHECK(!all_bf16_values(y_matmul));
  CHECK(same_values(y_dense, [&] {
    PolicyScope f32(Policy::float32());
    return relu(add(y_matmul, b));
  }()));
  CHECK(same_values(rounded(y_conv), cast(conv2d(bf(img), bf(filter)), DType::kF32)));
  CHECK(!all_bf16_values(y_conv));
  CHECK(!same_values(y_matmul, f32_matmul));
  CHECK(!same_values(y_dense, f32_dense));
  CHECK(!same_values(y_conv, f32_conv));
  require_close(y_dense, f32_dense, 0.02);
  // Everything else keeps f32: softmax, layer norm's statistics, reductions.
  CHECK(same_values(softmax(y_dense), [&] {
    PolicyScope f32(Policy::float32());
    return softmax(y_dense);
  }()));
  CHECK(reduce_mean(y_dense).dtype() == DType::kF32);
  // bf16 operands are not the policy's business: the same op as without it.
  CHECK(matmul(bf(x), bf(w)).dtype() == DType::kBF16);
}

TEST_CASE("under mixed_bfloat16 variables and gradients keep f32", "[precision]") {
  Problem p("batch=1");
  PolicyScope mixed(Policy::mixed_bfloat16());
  const DTensor loss = p.loss();
  CHECK(loss.dtype() == DType::kF32);
  const std::vector<DTensor> grads = p.gradients();
  REQUIRE(grads.size() == 2);
  CHECK(grads[0].dtype() == DType::kF32);
  CHECK(grads[1].dtype() == DType::kF32);
  // dW is the f32 accumulator of a bf16 product on one device (not rounded to bf16).
  CHECK(!all_bf16_values(grads[0]));
  PolicyScope f32(Policy::float32());
  const std::vector<DTensor> f32_grads = p.gradients();
  require_close(grads[0], f32_grads[0], 0.02);
  require_close(grads[1], f32_grads[1], 0.02);
}

TEST_CASE("mixed_bfloat16 on batch=4 matches one device; gradients reduced in f32 or bf16",
          "[precision]") {
  PolicyScope mixed(Policy::mixed_bfloat16());
  Problem one("batch=1"), four("batch=4");
  const DTensor loss_one = one.loss(), loss_four = four.loss();
  // The forward pass is row-separable: the same bits on any number of devices.
  CHECK(same_values(loss_one, loss_four));
  const std::vector<DTensor> g1 = one.gradients(), g4 = four.gradients();
  CHECK(g4[0].dtype() == DType::kF32);
  CHECK(g4[0].layout() == four.w.value().layout());
  // In one process the batch=4 weight gradient is one gemm over the stacked rows (the partial
  // group runs as one call), so it is the one-device value.
  CHECK(same_values(g4[0], g1[0]));
  require_close(g4[1], g1[1], 1e-6);
  PolicyScope bf16_reduction(Policy::mixed_bfloat16().with_bf16_gradient_reduction());
  const std::vector<DTensor> g4_bf16 = four.gradients();
  CHECK(g4_bf16[0].dtype() == DType::kF32);
  // The one sum of the partial group, rounded to bf16 once.
  CHECK(all_bf16_values(g4_bf16[0]));
  CHECK(same_values(g4_bf16[0], cast(cast(g1[0], DType::kBF16), DType::kF32)));
}

TEST_CASE("a partial bf16 sum widens to f32 before it is reduced", "[precision]") {
  // The f32 gradient reduction: bf16 terms cast to f32 stay partial, so the sum is taken in f32
  // and keeps bits bf16 cannot hold; a narrowing cast reduces first.
  const Mesh mesh = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  const Layout partial({"unsharded"}, mesh, {PartialDim{"batch", ReduceOp::kSum}});
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Tensor> terms;
  for (int d = 0; d < 4; ++d) {
    Tensor t = Tensor::empty({64}, DType::kF32);
    for (int64_t i = 0; i < 64; ++i) t.data<float>()[i] = u(rng);
    terms.push_back(kernels::cast(t, DType::kBF16));
  }
  const DTensor bf16_terms = pack(terms, partial);
  const DTensor widened = cast(bf16_terms, DType::kF32);
  CHECK(widened.layout() == partial);
  const DTensor summed = relayout(widened, partial.without_partial());
  CHECK(!all_bf16_values(summed));
  const DTensor narrowed = cast(summed, DType::kBF16);
  CHECK(!cast(widened, DType::kBF16).layout().is_partial());
  CHECK(narrowed.dtype() == DType::kBF16);
}
