// Equivalence of every op with the same computation on one device, over random meshes, layouts
// (partial and uneven included) and shapes; the collectives the expansions emit; and the errors.
#include "ops/ops.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "dtensor/collectives.h"
#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::distribute_with_terms;
using dtensor::testing::standard_meshes;
using dtensor::testing::test_mesh;

namespace {

constexpr int kCases = 200;

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed), meshes_(standard_meshes()) {}

  const Mesh& mesh() { return meshes_[pick(meshes_.size())]; }

  Layout layout(const Mesh& mesh, int64_t rank, bool partial = true) {
    auto key = std::make_pair(mesh.fingerprint(), rank * 2 + partial);
    auto it = layouts_.find(key);
    if (it == layouts_.end()) it = layouts_.emplace(key, all_layouts(mesh, rank, partial)).first;
    return it->second[pick(it->second.size())];
  }

  int64_t dim(int64_t lo = 1, int64_t hi = 9) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  Shape shape(int64_t rank) {
    Shape s;
    for (int64_t i = 0; i < rank; ++i) s.push_back(dim());
    return s;
  }
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool coin() { return pick(2) == 1; }

  // Multiples of 1/64 in [lo, hi]: partial terms and most sums stay exact in f32.
  Tensor values(const Shape& shape, double lo, double hi, DType dtype = DType::kF32) {
    Tensor t = Tensor::empty(shape, DType::kF64);
    std::uniform_int_distribution<int64_t> q(static_cast<int64_t>(lo * 64),
                                             static_cast<int64_t>(hi * 64));
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = q(rng_) / 64.0;
    return kernels::cast(t, dtype);
  }
  Tensor labels(const Shape& shape, int64_t classes) {
    Tensor t = Tensor::empty(shape, DType::kI32);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      t.data<int32_t>()[i] = static_cast<int32_t>(pick(static_cast<size_t>(classes)));
    }
    return t;
  }

  DTensor put(const Tensor& x, const Mesh& mesh, bool partial = true) {
    bool can_be_partial = partial && x.dtype() != DType::kBool;
    return distribute_with_terms(x, layout(mesh, x.rank(), can_be_partial), rng_());
  }

 private:
  std::mt19937_64 rng_;
  std::vector<Mesh> meshes_;
  std::map<std::pair<uint64_t, int64_t>, std::vector<Layout>> layouts_;
};

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  if (!is_floating(want.dtype())) {
    REQUIRE(bitwise_equal(got, want));
    return;
  }
  Tensor g = kernels::cast(got, DType::kF64), w = kernels::cast(want, DType::kF64);
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    double a = g.data<double>()[i], b = w.data<double>()[i];
    if (std::isnan(b)) {
      REQUIRE(std::isnan(a));
      continue;
    }
    INFO("element " << i << ": got " << a << ", want " << b);
    REQUIRE(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)));
  }
}

std::string describe(const std::vector<DTensor>& inputs) {
  std::string s;
  for (const DTensor& d : inputs) s += d.short_string() + " on " + d.mesh().dims_string() + "; ";
  return s;
}

}  // namespace

TEST_CASE("unary ops match one device") {
  Gen gen(1);
  using U = kernels::UnaryOp;
  const std::vector<std::tuple<const char*, DTensor (*)(const DTensor&), U, double, double>> ops = {
      {"neg", neg, U::kNeg, -4, 4},
      {"abs", dtensor::abs, U::kAbs, -4, 4},
      {"exp", dtensor::exp, U::kExp, -4, 4},
      {"log", dtensor::log, U::kLog, 0.1, 4},
      {"sqrt", dtensor::sqrt, U::kSqrt, 0, 4},
      {"rsqrt", rsqrt, U::kRsqrt, 0.1, 4},
      {"square", square, U::kSquare, -4, 4},
      {"relu", relu, U::kRelu, -4, 4},
      {"sigmoid", sigmoid, U::kSigmoid, -4, 4},
      {"tanh", dtensor::tanh, U::kTanh, -4, 4},
      {"gelu", gelu, U::kGelu, -4, 4}};
  for (const auto& [name, op, kernel, lo, hi] : ops) {
    for (int c = 0; c < kCases; ++c) {
      const Mesh& mesh = gen.mesh();
      Tensor x = gen.values(gen.shape(static_cast<int64_t>(gen.pick(4))), lo, hi);
      DTensor dx = gen.put(x, mesh);
      check_close(to_global(op(dx)), kernels::unary(kernel, x),
                  std::string(name) + " " + describe({dx}));
    }
  }
  for (int c = 0; c < kCases; ++c) {
    Tensor x = gen.values(gen.shape(2), -4, 4);
    DTensor dx = gen.put(x, gen.mesh());
    check_close(to_global(scale(dx, 0.25)), kernels::scale(x, 0.25), "scale " + describe({dx}));
    check_close(to_global(cast(dx, DType::kF64)), kernels::cast(x, DType::kF64), "cast");
    check_close(to_global(cast(dx, DType::kI32)), kernels::cast(x, DType::kI32), "cast i32");
  }
}

TEST_CASE("binary ops with broadcasting match one device") {
  Gen gen(2);
  using B = kernels::BinaryOp;
  const std::vector<std::tuple<const char*, DTensor (*)(const DTensor&, const DTensor&), B>> ops = {
      {"add", add, B::kAdd},
      {"sub", sub, B::kSub},
      {"mul", mul, B::kMul},
      {"div", dtensor::div, B::kDiv},
      {"pow", dtensor::pow, B::kPow},
      {"maximum", maximum, B::kMaximum},
      {"minimum", minimum, B::kMinimum},
      {"equal", equal, B::kEqual},
      {"not_equal", not_equal, B::kNotEqual},
      {"less", less, B::kLess},
      {"less_equal", less_equal, B::kLessEqual},
      {"greater", greater, B::kGreater},
      {"greater_equal", greater_equal, B::kGreaterEqual}};
  for (const auto& [name, op, kernel] : ops) {
    const bool positive = kernel == B::kPow || kernel == B::kDiv;
    for (int c = 0; c < kCases; ++c) {
      const Mesh& mesh = gen.mesh();
      Shape out = gen.shape(static_cast<int64_t>(gen.pick(4)));
      // b broadcasts: a suffix of out's dims, some of them 1.
      Shape b_shape(out.end() - static_cast<int64_t>(gen.pick(out.size() + 1)), out.end());
      for (int64_t& d : b_shape)
        if (gen.coin() && gen.coin()) d = 1;
      Tensor a = gen.values(out, positive ? 0.5 : -4, 4);
      Tensor b = gen.values(b_shape, positive ? 0.5 : -4, positive ? 2 : 4);
      DTensor da = gen.put(a, mesh), db = gen.put(b, mesh);
      if (gen.coin()) std::swap(da, db), std::swap(a, b);
      check_close(to_global(op(da, db)), kernels::binary(kernel, a, b),
                  std::string(name) + " " + describe({da, db}));
    }
  }
  for (int c = 0; c < kCases; ++c) {
    const Mesh& mesh = gen.mesh();
    Shape s = gen.shape(2);
    Tensor cond = kernels::binary(B::kGreater, gen.values(s, -1, 1), gen.values({s[1]}, -1, 1));
    Tensor a = gen.values(s, -4, 4), b = gen.values({1, s[1]}, -4, 4);
    DTensor dc = gen.put(cond, mesh), da = gen.put(a, mesh), db = gen.put(b, mesh);
    check_close(to_global(where(dc, da, db)), kernels::where(cond, a, b),
                "where " + describe({dc, da, db}));
  }
}

TEST_CASE("matmul matches one device for every sharding") {
  Gen gen(3);
  for (int c = 0; c < 3 * kCases; ++c) {
    const Mesh& mesh = gen.mesh();
    const bool ta = gen.coin(), tb = gen.coin();
    const int64_t m = gen.dim(), k = gen.dim(), n = gen.dim();
    Shape batch;
    if (gen.pick(3) == 0) batch.push_back(gen.dim(1, 4));
    Shape sa = batch, sb = batch;
    if (!batch.empty() && gen.coin()) sb.clear();  // broadcast a 2-D operand
    sa.insert(sa.end(),
              ta ? std::initializer_list<int64_t>{k, m} : std::initializer_list<int64_t>{m, k});
    sb.insert(sb.end(),
              tb ? std::initializer_list<int64_t>{n, k} : std::initializer_list<int64_t>{k, n});
    Tensor a = gen.values(sa, -2, 2), b = gen.values(sb, -2, 2);
    DTensor da = gen.put(a, mesh), db = gen.put(b, mesh);
    check_close(to_global(matmul(da, db, ta, tb)), kernels::matmul(a, b, {ta, tb, 0}),
                "matmul " + describe({da, db}));
  }
}

TEST_CASE("a contraction over a sharded dim sums each partial group in one call") {
  // A matmul whose K is sharded: the local devices of each partial group run as one call; one
  // holds the group's sum, the others shared zeros. Every consumer must see the same global
  // value as with one term per device: relayouts to every layout, linear ops passing the partial
  // state through, and a second contraction that reads the collapsed terms.
  Gen gen(11);
  for (const Mesh& mesh : standard_meshes()) {
    const std::vector<Layout> layouts = all_layouts(mesh, 2, true);
    for (int c = 0; c < 16; ++c) {
      const bool ta = gen.coin(), tb = gen.coin();
      const int64_t k = gen.dim(9, 21), m = gen.dim(1, 7), n = gen.dim(1, 7);
      Tensor a = gen.values(ta ? Shape{k, m} : Shape{m, k}, -2, 2);
      Tensor b = gen.values(tb ? Shape{n, k} : Shape{k, n}, -2, 2);
      // K sharded along a mesh dim (uneven when k does not divide), b's other dim maybe too.
      const size_t d = gen.pick(mesh.dims().size());
      const std::string along = mesh.dims()[d].name;
      const std::string other = mesh.dims()[(d + 1) % mesh.dims().size()].name;
      const std::string b_other = gen.coin() || other == along ? "unsharded" : other;
      DTensor da = distribute(a, Layout(ta ? std::vector<std::string>{along, "unsharded"}
                                           : std::vector<std::string>{"unsharded", along},
                                        mesh));
      DTensor db = distribute(b, Layout(tb ? std::vector<std::string>{b_other, along}
                                           : std::vector<std::string>{along, b_other},
                                        mesh));
      DTensor y = matmul(da, db, ta, tb);
      const std::string what =
          std::string("matmul") + (ta ? "T" : "N") + (tb ? "T" : "N") + " " + describe({da, db});
      INFO(what);
      REQUIRE(y.layout().is_partial());
      for (const auto& group : mesh.groups(y.layout().partial_mask())) {
        int holders = 0, local = 0;
        for (int64_t id : group) {
          if (!mesh.is_local(id)) continue;
          ++local;
          holders += y.shard(mesh.local_index(id)).is_shared_zeros() ? 0 : 1;
        }
        CHECK(holders == std::min(local, 1));
      }
      Tensor want = kernels::matmul(a, b, {ta, tb, 0});
      check_close(to_global(y), want, what);
      const Layout& to = layouts[gen.pick(layouts.size())];
      check_close(to_global(relayout(y, to)), want, what + " relayout to " + to.short_string());
      check_close(to_global(scale(add(y, y), 0.5)), want, what + " linear chain");
      Tensor w = gen.values({m, 3}, -2, 2);
      DTensor dw = distribute(w, Layout::replicated(mesh, 2));
      check_close(to_global(matmul(y, dw, true, false)), kernels::matmul(want, w, {true, false, 0}),
                  what + " second contraction");
    }
  }
}

TEST_CASE("reductions match one device, uneven and partial included") {
  Gen gen(4);
  using R = kernels::ReduceKind;
  const std::vector<
      std::tuple<const char*, DTensor (*)(const DTensor&, std::vector<int64_t>, bool), R>>
      ops = {{"reduce_sum", reduce_sum, R::kSum},
             {"reduce_mean", reduce_mean, R::kMean},
             {"reduce_max", reduce_max, R::kMax},
             {"reduce_min", reduce_min, R::kMin}};
  for (const auto& [name, op, kind] : ops) {
    for (int c = 0; c < kCases; ++c) {
      const Mesh& mesh = gen.mesh();
      int64_t rank = 1 + static_cast<int64_t>(gen.pick(3));
      Tensor x = gen.values(gen.shape(rank), -4, 4, gen.pick(4) == 0 ? DType::kI32 : DType::kF32);
      std::vector<int64_t> axes;
      for (int64_t d = 0; d < rank; ++d) {
        if (gen.coin()) axes.push_back(gen.coin() ? d : d - rank);
      }
      const bool keep = gen.coin();
      DTensor dx = gen.put(x, mesh);
      std::vector<int64_t> kernel_axes = axes;
      check_close(to_global(op(dx, axes, keep)), kernels::reduce(kind, x, kernel_axes, keep),
                  std::string(name) + " " + describe({dx}));
    }
  }
  for (int c = 0; c < kCases; ++c) {
    Tensor x = gen.values(gen.shape(2), -4, 4);
    int64_t axis = static_cast<int64_t>(gen.pick(2));
    DTensor dx = gen.put(x, gen.mesh());
    check_close(to_global(argmax(dx, axis)), kernels::argmax(x, axis, false),
                "argmax " + describe({dx}));
  }
}

TEST_CASE("softmax family and cross-entropy match one device, class dim sharded included") {
  Gen gen(5);
  for (int c = 0; c < kCases; ++c) {
    const Mesh& mesh = gen.mesh();
    Shape s = gen.shape(2);
    Tensor x = gen.values(s, -8, 8);
    int64_t axis = gen.coin() ? -1 : 0;
    DTensor dx = gen.put(x, mesh);
    std::string what = describe({dx});
    check_close(to_global(softmax(dx, axis)), kernels::softmax(x, axis), "softmax " + what);
    check_close(to_global(log_softmax(dx, axis)), kernels::log_softmax(x, axis),
                "log_softmax " + what);
    check_close(to_global(logsumexp(dx, axis, c % 2 == 0)), kernels::logsumexp(x, axis, c % 2 == 0),
                "logsumexp " + what);
    Tensor labels = gen.labels({s[0]}, s[1]);
    DTensor dl = gen.put(labels, mesh, /*partial=*/false);
    check_close(to_global(sparse_softmax_cross_entropy(dx, dl)),
                kernels::sparse_softmax_cross_entropy(x, labels),
                "cross-entropy " + describe({dx, dl}));
    check_close(to_global(one_hot(dl, s[1])), kernels::one_hot(labels, s[1], DType::kF32),
                "one_hot");
  }
}

TEST_CASE("reshape and transpose match one device") {
  Gen gen(6);
  for (int c = 0; c < kCases; ++c) {
    const Mesh& mesh = gen.mesh();
    Shape s = gen.shape(3);
    Tensor x = gen.values(s, -4, 4);
    DTensor dx = gen.put(x, mesh);
    Shape flat = {s[0], s[1] * s[2]};
    check_close(to_global(reshape(dx, flat)), x.reshaped(flat), "reshape " + describe({dx}));
    check_close(to_global(reshape(dx, {-1})), x.reshaped({x.num_elements()}), "reshape -1");
    std::vector<std::vector<int64_t>> perms = {{0, 2, 1}, {2, 0, 1}, {1, 0, 2}, {2, 1, 0}};
    auto perm = perms[gen.pick(perms.size())];
    check_close(to_global(transpose(dx, perm)), kernels::transpose(x, perm),
                "transpose " + describe({dx}));
  }
}

// Regression: a sharded dim after unsharded size-1 dims ([1, H, D] -> [H, D], a weight's gradient
// summed over the batch with keepdims) was gathered, then sliced again for its variable.
TEST_CASE("reshape keeps a sharded dim across size-1 dims") {
  const Mesh mesh = test_mesh({{"model", 4}});
  Gen gen(9);
  for (const Shape& shapes : std::vector<Shape>{{10, 8}, {1, 10, 8}, {1, 1, 10, 8}}) {
    const Tensor x = gen.values({1, 10, 8}, -1, 1);
    const DTensor dx = distribute(x, Layout({"unsharded", "model", "unsharded"}, mesh));
    reset_collective_stats();
    const DTensor y = reshape(dx, shapes);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout().spec(static_cast<int64_t>(shapes.size()) - 2) == "model");
    check_close(to_global(y), x.reshaped(shapes), "reshape " + shape_to_string(shapes));
    check_close(to_global(reshape(y, {1, 10, 8})), x, "reshape back");
  }
}

TEST_CASE("concat, slice, gather and layer_norm match one device") {
  Gen gen(8);
  for (int c = 0; c < kCases; ++c) {
    const Mesh& mesh = gen.mesh();
    Shape s = gen.shape(2);
    int64_t axis = static_cast<int64_t>(gen.pick(2));
    Shape s2 = s;
    s2[axis] = gen.dim();
    Tensor a = gen.values(s, -4, 4), b = gen.values(s2, -4, 4);
    DTensor da = gen.put(a, mesh), db = gen.put(b, mesh);
    check_close(to_global(concat({da, db}, axis)), kernels::concat({a, b}, axis),
                "concat " + describe({da, db}));
    std::vector<int64_t> begin = {static_cast<int64_t>(gen.pick(static_cast<size_t>(s[0]))), 0};
    Shape size = {-1, s[1] > 1 && gen.coin() ? s[1] - 1 : -1};
    check_close(to_global(slice(da, begin, size)), kernels::slice(a, begin, size),
                "slice " + describe({da}));
    Tensor idx = gen.labels({gen.dim()}, s[0]);
    DTensor di = gen.put(idx, mesh, /*partial=*/false);
    check_close(to_global(gather(da, di, 0)), kernels::gather(a, idx, 0),
                "gather " + describe({da, di}));
    Tensor gamma = gen.values({s[1]}, 0.5, 2), beta = gen.values({s[1]}, -1, 1);
    DTensor dg = gen.put(gamma, mesh), dbeta = gen.put(beta, mesh);
    check_close(to_global(layer_norm(da, dg, dbeta)), kernels::layer_norm(a, gamma, beta, 1e-5).y,
                "layer_norm " + describe({da, dg, dbeta}));
  }
}

TEST_CASE("expansions emit only the collectives the layouts force") {
  Mesh mesh = test_mesh({{"batch", 8}});
  Gen gen(7);
  Tensor x = gen.values({64, 32}, -1, 1), w = gen.values({32, 16}, -1, 1);
  DTensor dx = distribute(x, Layout::batch_sharded(mesh, "batch", 2));
  DTensor dw = distribute(w, Layout::replicated(mesh, 2));

  SECTION("batch-sharded x times replicated w emits no collective") {
    reset_collective_stats();
    DTensor y = relu(matmul(dx, dw));
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == Layout::batch_sharded(mesh, "batch", 2));
  }
  SECTION("a sharded contraction emits exactly one reduction") {
    DTensor xt = distribute(x, Layout::inner_sharded(mesh, "batch", 2));
    DTensor ws = distribute(w, Layout::batch_sharded(mesh, "batch", 2));
    reset_collective_stats();
    DTensor y = matmul(xt, ws);
    CHECK(y.layout().is_partial());
    CHECK(collective_stats().total() == 0);
    DTensor r = relayout(y, Layout::replicated(mesh, 2));
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
    CHECK(collective_stats().total() == 1);
    check_close(to_global(r), kernels::matmul(x, w), "sharded contraction");
  }
  SECTION("a chain of linear ops on partial values emits one reduction") {
    DTensor xt = distribute(x, Layout::inner_sharded(mesh, "batch", 2));
    DTensor ws = distribute(w, Layout::batch_sharded(mesh, "batch", 2));
    reset_collective_stats();
    DTensor y = matmul(xt, ws);
    DTensor z = scale(sub(add(y, y), neg(y)), 0.5);  // 1.5 y, still partial
    DTensor s = reduce_sum(z, {0});
    CHECK(s.layout().is_partial());
    Tensor got = to_global(relayout(s, Layout::replicated(mesh, 1)));
    CHECK(collective_stats().total() == 1);
    check_close(got,
                kernels::reduce(kernels::ReduceKind::kSum,
                                kernels::scale(kernels::matmul(x, w), 1.5), {0}, false),
                "linear chain");
  }
  SECTION("the rule moves the smaller operand") {
    // Both want mesh dim batch on different letters; gathering the small w is cheaper.
    DTensor wn = distribute(w, Layout::inner_sharded(mesh, "batch", 2));
    reset_collective_stats();
    DTensor y = matmul(dx, wn);
    CHECK(y.layout() == Layout::batch_sharded(mesh, "batch", 2));
    CHECK(collective_stats().count(CollectiveKind::kAllGather) == 1);
    // Bytes count this process's input shards: all of w in one process, its part under mpirun.
    int64_t local_bytes = 0;
    for (const Tensor& shard : wn.shards()) local_bytes += static_cast<int64_t>(shard.nbytes());
    CHECK(collective_stats().bytes == local_bytes);
  }
  SECTION("a sharded class dim costs two small all-reduces in softmax") {
    DTensor logits =
        distribute(gen.values({64, 80}, -4, 4), Layout::inner_sharded(mesh, "batch", 2));
    reset_collective_stats();
    DTensor p = softmax(logits);
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 2);
    CHECK(collective_stats().total() == 2);
    CHECK(p.layout() == logits.layout());
  }
}

TEST_CASE("ops reject bad inputs with clear errors") {
  Mesh mesh = test_mesh({{"batch", 8}});
  Mesh other = test_mesh({{"model", 8}});
  Layout rep2 = Layout::replicated(mesh, 2);
  DTensor a = distribute(Tensor::zeros({2, 3}, DType::kF32), rep2);
  DTensor b = distribute(Tensor::zeros({4}, DType::kF32), Layout::replicated(mesh, 1));
  DTensor d = distribute(Tensor::zeros({2, 3}, DType::kF64), rep2);
  DTensor o = distribute(Tensor::zeros({2, 3}, DType::kF32), Layout::replicated(other, 2));
  CHECK_THROWS_MATCHES(add(a, b), ShapeError,
                       Message("[add] shapes do not broadcast: f32[2,3] [unsharded,unsharded] and "
                               "f32[4] [unsharded]"));
  CHECK_THROWS_MATCHES(mul(a, d), DTypeError,
                       Message("[mul] dtypes differ: f32[2,3] [unsharded,unsharded] and f64[2,3] "
                               "[unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(
      add(a, o), MeshError,
      Message("[add] inputs f32[2,3] [unsharded,unsharded] and f32[2,3] "
              "[unsharded,unsharded] are on different meshes (batch=8 and model=8)"));
  CHECK_THROWS_MATCHES(matmul(a, a), ShapeError,
                       Message("[matmul] contraction dims differ (3 vs 2): f32[2,3] "
                               "[unsharded,unsharded] x f32[2,3] [unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(matmul(a, b), ShapeError,
                       Message("[matmul] operands need rank >= 2: f32[2,3] [unsharded,unsharded] x "
                               "f32[4] [unsharded]"));
  CHECK_THROWS_MATCHES(
      reduce_sum(a, {2}), InvalidArgumentError,
      Message("[reduce_sum] axis 2 is out of range for f32[2,3] [unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(
      reduce_sum(a, {1, -1}), InvalidArgumentError,
      Message("[reduce_sum] repeated axis in reduction of f32[2,3] [unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(reshape(a, {4, 2}), ShapeError,
                       Message("[reshape] cannot reshape f32[2,3] [unsharded,unsharded] to [4,2]"));
  CHECK_THROWS_MATCHES(transpose(a, {0, 0}), InvalidArgumentError,
                       Message("[transpose] [0,0] is not a permutation of the dims of f32[2,3] "
                               "[unsharded,unsharded]"));
  DTensor labels = distribute(Tensor::zeros({3}, DType::kI32), Layout::replicated(mesh, 1));
  CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(a, labels), ShapeError,
                       Message("[sparse_softmax_cross_entropy] labels i32[3] [unsharded] must have "
                               "the shape of logits f32[2,3] [unsharded,unsharded] without the "
                               "class dim"));
  CHECK_THROWS_MATCHES(where(a, a, a), DTypeError,
                       Message("[where] condition f32[2,3] [unsharded,unsharded] must be bool"));
}

// Ops whose sharding-cache key carries attributes (eps, axes, transposes, an axis) name only the
// op in their errors, on every path: validation, the expansion's mesh check, the local kernel.
TEST_CASE("errors name the op, never its cache key") {
  Mesh mesh = test_mesh({{"batch", 8}});
  Mesh other = test_mesh({{"model", 8}});
  Layout rep2 = Layout::replicated(mesh, 2);
  Layout cols = Layout({Layout::kUnsharded, "batch"}, mesh);
  DTensor x = distribute(Tensor::zeros({2, 8}, DType::kF32), rep2);
  DTensor gamma = distribute(Tensor::zeros({8}, DType::kF32), Layout::replicated(mesh, 1));
  DTensor gamma3 = distribute(Tensor::zeros({3}, DType::kF32), Layout::replicated(mesh, 1));
  DTensor gamma_other = distribute(Tensor::zeros({8}, DType::kF32), Layout::replicated(other, 1));
  CHECK_THROWS_MATCHES(layer_norm(x, gamma_other, gamma, 1e-3), MeshError,
                       Message("[layer_norm] inputs f32[2,8] [unsharded,unsharded] and f32[8] "
                               "[unsharded] are on different meshes (batch=8 and model=8)"));
  CHECK_THROWS_MATCHES(layer_norm(x, gamma3, gamma, 1e-3), ShapeError,
                       Message("[layer_norm] gamma f32[3] [unsharded] and beta f32[8] [unsharded] "
                               "must be [D] for x f32[2,8] [unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(layer_norm(x, gamma, gamma, -1.0), InvalidArgumentError,
                       Message("[layer_norm] eps must be >= 0, got -1"));

  DTensor flags = distribute(Tensor::zeros({2, 8}, DType::kBool), cols);
  CHECK_THROWS_MATCHES(reduce_sum(flags, {0, 1}, true), DTypeError,
                       Message("[reduce_sum] unsupported dtype bool: bool[2,1]"));
  CHECK_THROWS_MATCHES(reduce_max(x, {1, 1}, true), InvalidArgumentError,
                       Message("[reduce_max] repeated axis in reduction of f32[2,8] "
                               "[unsharded,unsharded]"));

  DTensor x_other = distribute(Tensor::zeros({2, 8}, DType::kF32), Layout::replicated(other, 2));
  CHECK_THROWS_MATCHES(matmul(x, x_other, false, true), MeshError,
                       Message("[matmul] inputs f32[2,8] [unsharded,unsharded] and f32[2,8] "
                               "[unsharded,unsharded] are on different meshes (batch=8 and "
                               "model=8)"));
  CHECK_THROWS_MATCHES(matmul(x, x, true, true), ShapeError,
                       Message("[matmul] contraction dims differ (2 vs 8): f32[2,8] "
                               "[unsharded,unsharded]^T x f32[2,8] [unsharded,unsharded]^T"));
  DTensor flags_rep = distribute(Tensor::zeros({2, 8}, DType::kBool), rep2);
  CHECK_THROWS_MATCHES(matmul(flags_rep, flags_rep, false, true), DTypeError,
                       Message("[matmul] unsupported dtype bool: bool[2,8] x bool[2,8]^T"));

  // Regression: over a sharded axis the softmax family failed in an internal op
  // ("[softmax_shift] unsupported dtype i32: i32[2,1]"). Both paths now give one error.
  DTensor ints = distribute(Tensor::zeros({2, 8}, DType::kI32), cols);
  const std::string described = ": i32[2,8] [unsharded,batch]";
  CHECK_THROWS_MATCHES(softmax(ints, 1), DTypeError,
                       Message("[softmax] unsupported dtype i32" + described));
  CHECK_THROWS_MATCHES(softmax(ints, 0), DTypeError,
                       Message("[softmax] unsupported dtype i32" + described));
  CHECK_THROWS_MATCHES(log_softmax(ints, -1), DTypeError,
                       Message("[log_softmax] unsupported dtype i32" + described));
  CHECK_THROWS_MATCHES(logsumexp(ints, 1, true), DTypeError,
                       Message("[logsumexp] unsupported dtype i32" + described));
  DTensor labels = distribute(Tensor::zeros({2}, DType::kI32), Layout::replicated(mesh, 1));
  CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(ints, labels), DTypeError,
                       Message("[sparse_softmax_cross_entropy] unsupported dtype i32" + described));
  CHECK_THROWS_MATCHES(softmax(x, 2), InvalidArgumentError,
                       Message("[softmax] axis 2 is out of range for f32[2,8] "
                               "[unsharded,unsharded]"));
}

TEST_CASE("regression: axis 0 on a scalar is an InvalidArgumentError in every op taking an axis") {
  Mesh mesh = test_mesh({{"batch", 8}});
  DTensor s = distribute(Tensor::zeros({}, DType::kF32), Layout::replicated(mesh, 0));
  DTensor idx = distribute(Tensor::zeros({2}, DType::kI32), Layout::replicated(mesh, 1));
  const std::string msg = " axis 0 is out of range for f32[] []";
  // These used to segfault (argmax: throw std::out_of_range).
  CHECK_THROWS_MATCHES(reduce_sum(s, {0}), InvalidArgumentError, Message("[reduce_sum]" + msg));
  CHECK_THROWS_MATCHES(reduce_mean(s, {0}), InvalidArgumentError, Message("[reduce_mean]" + msg));
  CHECK_THROWS_MATCHES(reduce_max(s, {0}), InvalidArgumentError, Message("[reduce_max]" + msg));
  CHECK_THROWS_MATCHES(reduce_min(s, {0}), InvalidArgumentError, Message("[reduce_min]" + msg));
  CHECK_THROWS_MATCHES(argmax(s, 0), InvalidArgumentError, Message("[argmax]" + msg));
  CHECK_THROWS_MATCHES(softmax(s, 0), InvalidArgumentError, Message("[softmax]" + msg));
  CHECK_THROWS_MATCHES(log_softmax(s, 0), InvalidArgumentError, Message("[log_softmax]" + msg));
  CHECK_THROWS_MATCHES(logsumexp(s, 0), InvalidArgumentError, Message("[logsumexp]" + msg));
  CHECK_THROWS_MATCHES(concat({s, s}, 0), InvalidArgumentError, Message("[concat]" + msg));
  CHECK_THROWS_MATCHES(gather(s, idx, 0), InvalidArgumentError, Message("[gather]" + msg));
  CHECK_THROWS_MATCHES(softmax(s), InvalidArgumentError,
                       Message("[softmax] axis -1 is out of range for f32[] []"));
  CHECK_THROWS_MATCHES(transpose(s, {0}), InvalidArgumentError,
                       Message("[transpose] [0] is not a permutation of the dims of f32[] []"));
  // Reducing a scalar over no axes is fine.
  CHECK(reduce_sum(s).shape() == Shape{});
  CHECK(transpose(s, {}).shape() == Shape{});
}

TEST_CASE("regression: axes are normalised in one place: negative, repeated, out of range") {
  Mesh mesh = test_mesh({{"batch", 8}});
  DTensor a = distribute(Tensor::zeros({2, 3}, DType::kF32), Layout::replicated(mesh, 2));
  const std::string shape = " f32[2,3] [unsharded,unsharded]";
  CHECK_THROWS_MATCHES(reduce_max(a, {-3}), InvalidArgumentError,
                       Message("[reduce_max] axis -3 is out of range for" + shape));
  CHECK_THROWS_MATCHES(reduce_mean(a, {0, -2}), InvalidArgumentError,
                       Message("[reduce_mean] repeated axis in reduction of" + shape));
  CHECK_THROWS_MATCHES(argmax(a, 2), InvalidArgumentError,
                       Message("[argmax] axis 2 is out of range for" + shape));
  CHECK_THROWS_MATCHES(argmax(a, INT64_MIN), InvalidArgumentError,
                       Message("[argmax] axis -9223372036854775808 is out of range for" + shape));
  CHECK_THROWS_MATCHES(logsumexp(a, 5), InvalidArgumentError,
                       Message("[logsumexp] axis 5 is out of range for" + shape));
  CHECK_THROWS_MATCHES(concat({a, a}, -3), InvalidArgumentError,
                       Message("[concat] axis -3 is out of range for" + shape));
  CHECK_THROWS_MATCHES(gather(a, a, 2), InvalidArgumentError,
                       Message("[gather] axis 2 is out of range for" + shape));
  CHECK_THROWS_MATCHES(transpose(a, {1, 2}), InvalidArgumentError,
                       Message("[transpose] [1,2] is not a permutation of the dims of" + shape));
  CHECK_THROWS_MATCHES(transpose(a, {-1, 0}), InvalidArgumentError,
                       Message("[transpose] [-1,0] is not a permutation of the dims of" + shape));
  CHECK(reduce_sum(a, {-1, 0}).shape() == Shape{});
  CHECK(argmax(a, -1).shape() == Shape{2});
  CHECK(concat({a, a}, -1).shape() == Shape{2, 6});
}

TEST_CASE("regression: slice checks begin and size without overflowing") {
  Mesh mesh = test_mesh({{"batch", 8}});
  DTensor x = distribute(Tensor::zeros({4}, DType::kF32), Layout::replicated(mesh, 1));
  // begin + size used to overflow and pass the check, then corrupt the heap.
  CHECK_THROWS_MATCHES(slice(x, {1}, {INT64_MAX}), ShapeError,
                       Message("[slice] box at [1] of size [9223372036854775807] does not fit "
                               "f32[4] [unsharded]"));
  CHECK_THROWS_MATCHES(slice(x, {INT64_MAX}, {-1}), ShapeError,
                       Message("[slice] box at [9223372036854775807] of size [-1] does not fit "
                               "f32[4] [unsharded]"));
  CHECK_THROWS_MATCHES(slice(x, {INT64_MIN}, {-1}), ShapeError,
                       Message("[slice] box at [-9223372036854775808] of size [-1] does not fit "
                               "f32[4] [unsharded]"));
  CHECK_THROWS_MATCHES(slice(x, {2}, {-2}), ShapeError,
                       Message("[slice] box at [2] of size [-2] does not fit f32[4] [unsharded]"));
  CHECK(slice(x, {4}, {-1}).shape() == Shape{0});
  CHECK(slice(x, {1}, {3}).shape() == Shape{3});
}

TEST_CASE("regression: one_hot with a huge depth is an error, not a segfault") {
  Mesh mesh = test_mesh({{"batch", 8}});
  DTensor idx = distribute(Tensor::zeros({4}, DType::kI32), Layout::replicated(mesh, 1));
  CHECK_THROWS_MATCHES(one_hot(idx, INT64_MAX), ShapeError,
                       Message("[one_hot] shape [4,9223372036854775807] has too many elements (at "
                               "most 1125899906842624 are supported)"));
  CHECK_THROWS_MATCHES(one_hot(idx, int64_t{1} << 62), ShapeError,
                       Message("[one_hot] shape [4,4611686018427387904] has too many elements (at "
                               "most 1125899906842624 are supported)"));
  // Within the element limit but far beyond one buffer: the allocation is refused, by size.
  CHECK_THROWS_AS(one_hot(idx, int64_t{1} << 45), InvalidArgumentError);
  CHECK(one_hot(idx, 0).shape() == Shape{4, 0});
}

TEST_CASE("regression: where's broadcast error names the operands that disagree") {
  Mesh mesh = test_mesh({{"batch", 8}});
  DTensor cond = distribute(Tensor::zeros({3}, DType::kBool), Layout::replicated(mesh, 1));
  DTensor a = distribute(Tensor::zeros({1}, DType::kF32), Layout::replicated(mesh, 1));
  DTensor b = distribute(Tensor::zeros({2}, DType::kF32), Layout::replicated(mesh, 1));
  // Used to name the condition and `a`, which broadcast fine.
  CHECK_THROWS_MATCHES(where(cond, a, b), ShapeError,
                       Message("[where] shapes do not broadcast: bool[3] [unsharded] and f32[2] "
                               "[unsharded]"));
  CHECK_THROWS_MATCHES(where(cond, b, a), ShapeError,
                       Message("[where] shapes do not broadcast: bool[3] [unsharded] and f32[2] "
                               "[unsharded]"));
  DTensor c = distribute(Tensor::zeros({3}, DType::kF32), Layout::replicated(mesh, 1));
  CHECK_THROWS_MATCHES(where(cond, c, b), ShapeError,
                       Message("[where] shapes do not broadcast: f32[3] [unsharded] and f32[2] "
                               "[unsharded]"));
  CHECK(where(cond, a, c).shape() == Shape{3});
}

TEST_CASE("regression: reshape and broadcast_to reject shapes that overflow or are negative") {
  Mesh mesh = test_mesh({{"batch", 8}});
  DTensor a = distribute(Tensor::zeros({2, 3}, DType::kF32), Layout::replicated(mesh, 2));
  const int64_t big = int64_t{1} << 32;
  CHECK_THROWS_MATCHES(reshape(a, {big, big, -1}), ShapeError,
                       Message("[reshape] cannot reshape f32[2,3] [unsharded,unsharded] to "
                               "[4294967296,4294967296,-1]"));
  CHECK_THROWS_MATCHES(reshape(a, {-2, -3}), ShapeError,
                       Message("[reshape] cannot reshape f32[2,3] [unsharded,unsharded] to "
                               "[-2,-3]"));
  CHECK_THROWS_MATCHES(broadcast_to(a, {-1, 2, 3}), ShapeError,
                       Message("[broadcast_to] negative dim in shape [-1,2,3]"));
  CHECK_THROWS_MATCHES(
      broadcast_to(a, {big, big, 2, 3}), ShapeError,
      Message("[broadcast_to] shape [4294967296,4294967296,2,3] has too many elements (at most "
              "1125899906842624 are supported)"));
  CHECK(reshape(a, {3, -1}).shape() == Shape{3, 2});
}
