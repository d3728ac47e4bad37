// Non-finite values (+inf, -inf, NaN) and huge values give the single-device result on every mesh
// and layout, including which positions are NaN or infinite: softmax, log_softmax, logsumexp,
// sparse_softmax_cross_entropy, reduce_max/reduce_min, the max/min collectives, and products with a
// partial-sum operand.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "dtensor/collectives.h"
#include "dtensor/relayout.h"
#include "kernels/kernels.h"
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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Same NaN positions, same infinities (with sign), finite values equal to f32 rounding.
void check_same(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  Tensor g = kernels::cast(got, DType::kF64), w = kernels::cast(want, DType::kF64);
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    const double a = g.data<double>()[i], b = w.data<double>()[i];
    INFO("element " << i << ": got " << a << ", want " << b);
    if (std::isnan(b) || std::isinf(b)) {
      REQUIRE((std::isnan(a) == std::isnan(b) && (std::isnan(b) || a == b)));
      continue;
    }
    REQUIRE(std::isfinite(a));
    REQUIRE(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)));
  }
}

Tensor f32(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

// Rows mixing ordinary values with +inf, -inf, NaN and huge magnitudes; some rows are all -inf,
// all +inf or hold a single special value, so every case of the semantics is met.
Tensor special_values(const Shape& shape, std::mt19937_64& rng) {
  const float specials[] = {kInf, -kInf, kNaN, 1e30f, -1e30f, 3e38f, -3e38f, 1e6f, 1e6f + 0.5f};
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  std::uniform_int_distribution<int> q(-512, 512);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<size_t> which(0, std::size(specials) - 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    p[i] = kind(rng) < 7 ? static_cast<float>(q(rng)) / 64.0f : specials[which(rng)];
  }
  // Whole rows (last axis) and columns (axis 0) of one value.
  const int64_t cols = shape.back(), rows = t.num_elements() / cols;
  const float fills[] = {-kInf, kInf, kNaN};
  if (rows > 1) {
    const float v = fills[which(rng) % 3];
    std::fill(p, p + cols, v);
  }
  if (cols > 1 && rows > 0) {
    const float v = fills[which(rng) % 3];
    for (int64_t r = 0; r < rows; ++r) p[r * cols + cols - 1] = v;
  }
  return t;
}

// Every standard mesh with every layout of rank 2 (partial sums included; shapes below make some
// shards uneven).
std::vector<Layout> every_layout() {
  std::vector<Layout> out;
  for (const Mesh& mesh : standard_meshes()) {
    for (const Layout& l : all_layouts(mesh, 2, /*with_partial=*/true)) out.push_back(l);
  }
  return out;
}

}  // namespace

TEST_CASE("sharded softmax family matches one device on rows of -inf, +inf and NaN") {
  // Regression: over a sharded axis, x - max(x) was inf - inf or -inf - -inf (NaN), and a NaN on
  // a device other than the first was dropped by the max all-reduce.
  const Tensor x = f32({5, 4}, {-kInf, -kInf, -kInf,  -kInf,  //
                                1,     kInf,  2,      3,      //
                                1,     2,     kNaN,   3,      //
                                1e30f, 100,   -1e30f, 200,    //
                                -kInf, 2,     -kInf,  1});
  // The single-device semantics themselves.
  Tensor lse = kernels::logsumexp(x, 1, false);
  CHECK(lse.data<float>()[0] == -kInf);
  CHECK(lse.data<float>()[1] == kInf);
  CHECK(std::isnan(lse.data<float>()[2]));
  CHECK(lse.data<float>()[3] == 1e30f);
  Tensor sm = kernels::softmax(x, 1);
  CHECK(std::isnan(sm.data<float>()[5]));  // +inf / +inf
  CHECK(sm.data<float>()[4] == 0.0f);
  CHECK(sm.data<float>()[6] == 0.0f);
  CHECK(sm.data<float>()[12] == 1.0f);
  Tensor ls = kernels::log_softmax(x, 1);
  CHECK(ls.data<float>()[4] == -kInf);
  CHECK(ls.data<float>()[13] == -1e30f);

  const Mesh mesh = test_mesh({{"batch", 8}});
  for (const char* spec : {"batch"}) {
    DTensor dx = distribute(x, Layout({"unsharded", spec}, mesh));
    const std::string what = dx.short_string();
    check_same(to_global(logsumexp(dx, 1, false)), lse, "logsumexp " + what);
    check_same(to_global(softmax(dx, 1)), sm, "softmax " + what);
    check_same(to_global(log_softmax(dx, 1)), ls, "log_softmax " + what);
  }
}

TEST_CASE("max and min all-reduces propagate NaN from any device") {
  // Regression: std::max/std::min (and MPI_MAX/MPI_MIN) keep the first operand when the second
  // is NaN, so a NaN survived only on the first device of a group.
  const Mesh mesh = test_mesh({{"batch", 8}});
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    for (int64_t holder = 0; holder < 8; ++holder) {
      INFO(reduce_op_name(op) << " with NaN on device " << holder);
      for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
        std::vector<Tensor> shards;
        for (int64_t id : mesh.local_device_ids()) {
          Tensor t = kernels::cast(
              f32({3}, {static_cast<float>(id), id == holder ? kNaN : 1.0f, -kInf}), dtype);
          shards.push_back(t.with_device(mesh_device(mesh, id)));
        }
        std::vector<Tensor> out = all_reduce(mesh, 1, shards, op);
        for (const Tensor& t : out) {
          Tensor r = kernels::cast(t, DType::kF32);
          CHECK(r.data<float>()[0] == (op == ReduceOp::kMax ? 7.0f : 0.0f));
          CHECK(std::isnan(r.data<float>()[1]));
          CHECK(r.data<float>()[2] == -kInf);
        }
        std::vector<Tensor> scattered = reduce_scatter(mesh, 1, shards, op, 0);
        for (size_t i = 0; i < scattered.size(); ++i) {
          const int64_t id = mesh.local_device_ids()[i];
          if (id == 1) CHECK(std::isnan(kernels::cast(scattered[i], DType::kF32).data<float>()[0]));
        }
      }
    }
  }
}

TEST_CASE("reduce_max and reduce_min propagate NaN whichever device holds it") {
  // Regression: a NaN in a shard other than the first was dropped when the partial max/min terms
  // were combined.
  const Mesh mesh = test_mesh({{"batch", 8}});
  for (int64_t pos = 0; pos < 16; ++pos) {
    std::vector<float> v(16);
    for (int i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 5) - 2;
    v[static_cast<size_t>(pos)] = kNaN;
    const Tensor x = f32({2, 8}, v);
    for (const Layout& layout : {Layout({"unsharded", "batch"}, mesh)}) {
      DTensor dx = distribute(x, layout);
      for (bool keep : {false, true}) {
        check_same(to_global(reduce_max(dx, {1}, keep)),
                   kernels::reduce(kernels::ReduceKind::kMax, x, {1}, keep), "reduce_max");
        check_same(to_global(reduce_min(dx, {}, keep)),
                   kernels::reduce(kernels::ReduceKind::kMin, x, {}, keep), "reduce_min");
      }
    }
  }
  // A value partial over max with the NaN term on the last device.
  const Layout partial_max({"unsharded"}, mesh, {{"batch", ReduceOp::kMax}});
  std::vector<Tensor> terms;
  for (int64_t id : mesh.local_device_ids()) {
    terms.push_back(f32({2}, {id == 7 ? kNaN : 1.0f, static_cast<float>(id)})
                        .with_device(mesh_device(mesh, id)));
  }
  DTensor p(Shape{2}, DType::kF32, partial_max, terms);
  Tensor g = to_global(p);
  CHECK(std::isnan(g.data<float>()[0]));
  CHECK(g.data<float>()[1] == 7.0f);
}

TEST_CASE("mul and div by a non-finite factor do not pass a partial sum through") {
  // Regression: mul(inf, partial) multiplied every device's term, and the zero terms gave
  // inf * 0 = NaN where the single-device product is inf; div(partial, 0) likewise.
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Tensor a = f32({2, 3}, {kInf, -kInf, 2, kNaN, 0, 1});
  const Tensor p = f32({2, 3}, {3, 5, -kInf, 1, 2, 4});
  const Tensor zeros_and_inf = f32({2, 3}, {0, -0.0f, kInf, 0, 2, 0});
  const Layout partial({"unsharded", "unsharded"}, mesh, {{"batch", ReduceOp::kSum}});
  DTensor da = distribute(a, Layout::replicated(mesh, 2));
  DTensor dz = distribute(zeros_and_inf, Layout::replicated(mesh, 2));
  for (uint64_t seed = 0; seed < 4; ++seed) {
    DTensor dp = seed == 0 ? distribute(p, partial) : distribute_with_terms(p, partial, seed);
    check_same(to_global(mul(da, dp)), kernels::binary(kernels::BinaryOp::kMul, a, p), "a * p");
    check_same(to_global(mul(dp, da)), kernels::binary(kernels::BinaryOp::kMul, p, a), "p * a");
    check_same(to_global(dtensor::div(dp, dz)),
               kernels::binary(kernels::BinaryOp::kDiv, p, zeros_and_inf), "p / z");
    check_same(to_global(dtensor::div(dp, da)), kernels::binary(kernels::BinaryOp::kDiv, p, a),
               "p / a");
  }
  // The finite case still passes the partial sum through: no collective.
  const Tensor finite = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  DTensor df = distribute(finite, Layout::replicated(mesh, 2));
  DTensor dp = distribute_with_terms(finite, partial, 9);
  reset_collective_stats();
  DTensor y = mul(df, dp);
  DTensor q = dtensor::div(dp, df);
  CHECK(y.layout().is_partial());
  CHECK(q.layout().is_partial());
  // Processes agree on the check with one one-byte all-reduce; one process needs none.
  CHECK(collective_stats().count(CollectiveKind::kAllReduce) == (mesh.num_processes() > 1 ? 2 : 0));
}

TEST_CASE("scale of a partial sum by a non-finite factor gives the single-device result") {
  // Regression: scale(partial, inf) scaled every device's term, and the zero terms gave
  // inf * 0 = NaN where the single-device result is ±inf.
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Tensor p = f32({2, 3}, {3, 5, -2, 0, 2, 4});
  const Layout partial({"unsharded", "unsharded"}, mesh, {{"batch", ReduceOp::kSum}});
  for (double alpha :
       {static_cast<double>(kInf), -static_cast<double>(kInf), static_cast<double>(kNaN), 2.5}) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      DTensor dp = seed == 0 ? distribute(p, partial) : distribute_with_terms(p, partial, seed);
      check_same(to_global(scale(dp, alpha)), kernels::scale(p, alpha),
                 fmt::format("p * {}", alpha));
    }
  }
  // A finite factor still passes the partial sum through.
  CHECK(scale(distribute_with_terms(p, partial, 5), 2.5).layout().is_partial());
}

TEST_CASE("integer div of a partial sum divides the sum, not each term") {
  // Regression: div passed a partial-sum dividend through for every dtype, but integer division
  // truncates each term: (3 + 4) / 2 is 3, 3 / 2 + 4 / 2 is 3 only by luck, 1 / 2 + 1 / 2 is 0.
  const Mesh mesh = test_mesh({{"batch", 8}});
  Tensor a = Tensor::empty({4}, DType::kI32), b = Tensor::empty({4}, DType::kI32);
  for (int32_t i = 0; i < 4; ++i) {
    a.data<int32_t>()[i] = 7 + 10 * i;
    b.data<int32_t>()[i] = 2 + i;
  }
  const Layout partial({"unsharded"}, mesh, {{"batch", ReduceOp::kSum}});
  DTensor da = distribute_with_terms(a, partial, 5);
  DTensor db = distribute(b, Layout::replicated(mesh, 1));
  CHECK(bitwise_equal(to_global(dtensor::div(da, db)),
                      kernels::binary(kernels::BinaryOp::kDiv, a, b)));
}

// [local]: under mpirun only the processes holding the bad label would throw.
TEST_CASE("out-of-range labels throw the same error whether the class dim is sharded or not",
          "[local]") {
  // Regression: with the class dim sharded the labels went through one_hot, which ignores
  // indices outside [0, C): the loss silently left out the label logit.
  const Mesh mesh = test_mesh({{"batch", 2}, {"model", 4}});
  const Tensor logits = f32({4, 6}, std::vector<float>(24, 0.5f));
  for (int32_t bad : {6, 9, -1}) {
    Tensor labels = Tensor::empty({4}, DType::kI32);
    for (int32_t i = 0; i < 4; ++i) labels.data<int32_t>()[i] = i;
    labels.data<int32_t>()[2] = bad;
    const std::string message = "[sparse_softmax_cross_entropy] label " + std::to_string(bad) +
                                " at position [2] is outside [0, 6)";
    for (const Layout& ll : all_layouts(mesh, 2, false)) {
      for (const Layout& lb : all_layouts(mesh, 1, false)) {
        DTensor dl = distribute(logits, ll);
        DTensor db = distribute(labels, lb);
        INFO(dl.short_string() << " " << db.short_string());
        CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(dl, db), InvalidArgumentError,
                             Message(message));
      }
    }
  }
}

TEST_CASE("class-sharded cross-entropy keeps f32 precision for large logits") {
  // Regression: logsumexp(x) - x[label] cancelled catastrophically at 1e6 (ulp 0.0625): 1.4375
  // instead of 1.4549.
  const Mesh mesh = test_mesh({{"batch", 8}});
  std::vector<float> v;
  for (int r = 0; r < 3; ++r) {
    const float base = r == 0 ? 1e6f : r == 1 ? -1e7f : 3e30f;
    for (int c = 0; c < 8; ++c) v.push_back(base + static_cast<float>(c % 3) * (r == 2 ? 0 : 1));
  }
  const Tensor logits = f32({3, 8}, v);
  Tensor labels = Tensor::empty({3}, DType::kI32);
  labels.data<int32_t>()[0] = 0;
  labels.data<int32_t>()[1] = 2;
  labels.data<int32_t>()[2] = 5;
  const Tensor want = kernels::sparse_softmax_cross_entropy(logits, labels);
  double sum = 0;  // row 0 in f64: offsets c % 3 from 1e6, label 0 at offset 0
  for (int c = 0; c < 8; ++c) sum += std::exp(static_cast<double>(c % 3));
  CHECK(want.data<float>()[0] == Approx(std::log(sum)).epsilon(1e-6));
  DTensor dl = distribute(logits, Layout({"unsharded", "batch"}, mesh));
  DTensor db = distribute(labels, Layout::replicated(mesh, 1));
  check_same(to_global(sparse_softmax_cross_entropy(dl, db)), want, "class-sharded loss");
}

TEST_CASE("non-finite inputs give the single-device result on every mesh and layout") {
  std::mt19937_64 rng(13);
  const std::vector<Layout> layouts = every_layout();
  const std::vector<Shape> shapes = {{3, 5}, {7, 9}, {2, 8}, {9, 3}};
  int64_t cases = 0;
  for (const Layout& layout : layouts) {
    for (const Shape& shape : shapes) {
      const Tensor x = special_values(shape, rng);
      DTensor dx = distribute_with_terms(x, layout, rng());
      const std::string what = dx.short_string() + " on " + layout.mesh().dims_string();
      for (int64_t axis : {0, 1}) {
        const std::string on = what + " axis " + std::to_string(axis);
        check_same(to_global(softmax(dx, axis)), kernels::softmax(x, axis), "softmax " + on);
        check_same(to_global(log_softmax(dx, axis)), kernels::log_softmax(x, axis),
                   "log_softmax " + on);
        for (bool keep : {false, true}) {
          check_same(to_global(logsumexp(dx, axis, keep)), kernels::logsumexp(x, axis, keep),
                     "logsumexp " + on);
          check_same(to_global(reduce_max(dx, {axis}, keep)),
                     kernels::reduce(kernels::ReduceKind::kMax, x, {axis}, keep),
                     "reduce_max " + on);
          check_same(to_global(reduce_min(dx, {axis}, keep)),
                     kernels::reduce(kernels::ReduceKind::kMin, x, {axis}, keep),
                     "reduce_min " + on);
        }
      }
      check_same(to_global(reduce_max(dx, {}, false)),
                 kernels::reduce(kernels::ReduceKind::kMax, x, {}, false),
                 "reduce_max all " + what);
      // Labels avoid nothing: a +inf, -inf or NaN label logit is part of the test.
      Tensor labels = Tensor::empty({shape[0]}, DType::kI32);
      for (int64_t r = 0; r < shape[0]; ++r) {
        labels.data<int32_t>()[r] = static_cast<int32_t>(rng() % static_cast<uint64_t>(shape[1]));
      }
      const Layout& plain = layout.without_partial();
      DTensor dl = distribute(labels, Layout({plain.sharding_specs()[0]}, layout.mesh()));
      check_same(to_global(sparse_softmax_cross_entropy(dx, dl)),
                 kernels::sparse_softmax_cross_entropy(x, labels), "cross-entropy " + what);
      // Products with a (possibly partial) operand and a non-finite factor.
      const Tensor f = special_values(shape, rng);
      DTensor df = distribute(f, Layout::replicated(layout.mesh(), 2));
      check_same(to_global(mul(df, dx)), kernels::binary(kernels::BinaryOp::kMul, f, x),
                 "mul " + what);
      check_same(to_global(dtensor::div(dx, df)), kernels::binary(kernels::BinaryOp::kDiv, x, f),
                 "div " + what);
      ++cases;
    }
  }
  CHECK(cases == static_cast<int64_t>(layouts.size() * shapes.size()));
}
