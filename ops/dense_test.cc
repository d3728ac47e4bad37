// The fused dense op against the composition it replaces, relu(add(matmul(x, w), b)): values and
// gradients on every layout of the standard meshes (uneven dims, partial inputs, sharded
// contractions that make it fall back), and its errors.
#include <catch2/catch.hpp>

#include <random>

#include "dtensor/creation.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::distribute_with_terms;
using dtensor::testing::standard_meshes;
using dtensor::testing::test_mesh;

namespace {

// Multiples of 1/64 in [-1, 1]: products and their short sums are exact in f32, so the fused and
// unfused results must agree bit for bit whatever gemm computes them.
Tensor values(const Shape& shape, std::mt19937_64& rng, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  std::uniform_int_distribution<int> q(-64, 64);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = q(rng) / 64.0;
  return kernels::cast(t, dtype);
}

DTensor unfused(const DTensor& x, const DTensor& w, const DTensor& b, DenseActivation act) {
  DTensor y = add(matmul(x, w), b);
  return act == DenseActivation::kRelu ? relu(y) : y;
}

void require_equal(const DTensor& a, const DTensor& b, const std::string& what) {
  INFO(what);
  const Tensor ga = to_global(a), gb = to_global(b);
  REQUIRE(ga.shape() == gb.shape());
  const Tensor fa = kernels::cast(ga, DType::kF64), fb = kernels::cast(gb, DType::kF64);
  for (int64_t i = 0; i < fa.num_elements(); ++i) {
    REQUIRE(fa.data<double>()[i] == fb.data<double>()[i]);
  }
}

}  // namespace

TEST_CASE("dense equals relu(add(matmul)) on every layout", "[dense]") {
  std::mt19937_64 rng(16);
  // 13 and 9 are uneven on 2, 4 and 8 devices.
  const Tensor x = values({13, 7}, rng), w = values({7, 9}, rng), b = values({9}, rng);
  for (const Mesh& mesh : standard_meshes()) {
    const std::vector<Layout> matrices = all_layouts(mesh, 2, true);
    const std::vector<Layout> vectors = all_layouts(mesh, 1, true);
    for (const Layout& lx : matrices) {
      for (const Layout& lw : matrices) {
        const Layout& lb = vectors[rng() % vectors.size()];
        const DTensor dx = distribute_with_terms(x, lx, rng());
        const DTensor dw = distribute_with_terms(w, lw, rng());
        const DTensor db = distribute_with_terms(b, lb, rng());
        for (DenseActivation act : {DenseActivation::kNone, DenseActivation::kRelu}) {
          require_equal(dense(dx, dw, db, act), unfused(dx, dw, db, act),
                        lx.to_string() + " x " + lw.to_string() + " + " + lb.to_string());
        }
      }
    }
  }
}

TEST_CASE("dense gradients equal the unfused composition's", "[dense]") {
  std::mt19937_64 rng(17);
  const Tensor x = values({2, 5, 6}, rng), w = values({6, 3}, rng), b = values({3}, rng);
  const Tensor r = values({2, 5, 3}, rng);
  for (const Mesh& mesh : standard_meshes()) {
    const std::vector<Layout> rank3 = all_layouts(mesh, 3, false);
    const std::vector<Layout> rank2 = all_layouts(mesh, 2, false);
    const std::vector<Layout> rank1 = all_layouts(mesh, 1, false);
    for (int trial = 0; trial < 40; ++trial) {
      const DTensor dx = distribute_with_terms(x, rank3[rng() % rank3.size()], rng());
      const DTensor dw = distribute_with_terms(w, rank2[rng() % rank2.size()], rng());
      const DTensor db = distribute_with_terms(b, rank1[rng() % rank1.size()], rng());
      const DTensor dr = distribute_with_terms(r, rank3[rng() % rank3.size()], rng());
      auto grads = [&](bool fused) {
        GradientTape tape;
        tape.watch(dx);
        tape.watch(dw);
        tape.watch(db);
        const DTensor y = fused ? dense(dx, dw, db, DenseActivation::kRelu)
                                : unfused(dx, dw, db, DenseActivation::kRelu);
        return tape.gradient(reduce_sum(mul(y, dr)), {dx, dw, db});
      };
      const std::vector<DTensor> fused = grads(true), plain = grads(false);
      const std::string where = dx.layout().to_string() + " x " + dw.layout().to_string();
      for (size_t i = 0; i < 3; ++i) require_equal(fused[i], plain[i], where);
    }
  }
}

TEST_CASE("dense in bf16 agrees with f32 to bf16 rounding", "[dense]") {
  std::mt19937_64 rng(18);
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Tensor x = values({16, 40}, rng), w = values({40, 24}, rng), b = values({24}, rng);
  auto run = [&](DType dtype) {
    const DTensor dx =
        distribute_with_terms(kernels::cast(x, dtype), Layout::batch_sharded(mesh, "batch", 2), 1);
    const DTensor dw =
        distribute_with_terms(kernels::cast(w, dtype), Layout::replicated(mesh, 2), 2);
    const DTensor db =
        distribute_with_terms(kernels::cast(b, dtype), Layout::replicated(mesh, 1), 3);
    return kernels::cast(to_global(dense(dx, dw, db, DenseActivation::kRelu)), DType::kF32);
  };
  // Sums of 40 products of multiples of 1/64 are exact in f32: the bf16 result is their rounding.
  const Tensor f32 = run(DType::kF32), bf16 = run(DType::kBF16);
  const Tensor rounded = kernels::cast(kernels::cast(f32, DType::kBF16), DType::kF32);
  for (int64_t i = 0; i < f32.num_elements(); ++i) {
    REQUIRE(bf16.data<float>()[i] == rounded.data<float>()[i]);
  }
}

TEST_CASE("dense rejects inputs that do not fit", "[dense][errors]") {
  const Mesh mesh = test_mesh({{"batch", 2}});
  const Mesh other = test_mesh({{"x", 2}});
  auto make = [&](const Shape& shape, DType dtype = DType::kF32, const Mesh* m = nullptr) {
    return zeros(shape, Layout::replicated(m ? *m : mesh, static_cast<int64_t>(shape.size())),
                 dtype);
  };
  const DTensor x = make({4, 3}), w = make({3, 5}), b = make({5});
  CHECK_THROWS_MATCHES(dense(make({3}), w, b), ShapeError,
                       Message("[dense] need x of rank >= 2, w of rank 2 and b of rank 1: "
                               "f32[3] [unsharded], f32[3,5] [unsharded,unsharded], "
                               "f32[5] [unsharded]"));
  CHECK_THROWS_MATCHES(dense(x, make({4, 5}), b), ShapeError,
                       Message("[dense] x [..., m, k], w [k, n] and b [n] do not fit: "
                               "f32[4,3] [unsharded,unsharded], f32[4,5] [unsharded,unsharded], "
                               "f32[5] [unsharded]"));
  CHECK_THROWS_MATCHES(dense(x, w, make({4})), ShapeError,
                       Message("[dense] x [..., m, k], w [k, n] and b [n] do not fit: "
                               "f32[4,3] [unsharded,unsharded], f32[3,5] [unsharded,unsharded], "
                               "f32[4] [unsharded]"));
  CHECK_THROWS_MATCHES(dense(x, w, make({5}, DType::kF64)), DTypeError,
                       Message("[dense] dtypes differ: f32[4,3] [unsharded,unsharded] and "
                               "f64[5] [unsharded]"));
  CHECK_THROWS_AS(dense(x, w, make({5}, DType::kF32, &other)), MeshError);
}
