// The halo exchange against direct slices of the global tensor, over random meshes, layouts
// (uneven and empty shards included) and intervals; its adjoint against sums of the global
// contributions; one collective per exchange; the window formula against brute force; errors.
#include "ops/halo.h"

#include <catch2/catch.hpp>

#include <random>

#include "dtensor/collectives.h"
#include "runtime/block.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::integer_tensor;
using dtensor::testing::standard_meshes;
using dtensor::testing::test_mesh;

namespace {

constexpr int kCases = 300;

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A random case: a global tensor, its layout, the exchanged axis and one interval per shard.
struct Case {
  Mesh mesh;
  Layout layout;
  Shape shape;
  int64_t axis = 0;
  std::vector<HaloInterval> needed;

  std::string describe() const {
    std::string s = shape_to_string(shape) + " " + layout.short_string() + " on " +
                    mesh.dims_string() + " axis " + std::to_string(axis) + " intervals";
    for (const HaloInterval& n : needed) {
      s += " [" + std::to_string(n.begin) + "," + std::to_string(n.end) + ")";
    }
    return s;
  }
  // Whether some device needs rows another one owns: the exchange then runs one collective.
  bool moves_data() const {
    const int64_t k = layout.num_shards(axis);
    for (int64_t i = 0; i < k; ++i) {
      ShardRange c = chunk_range(shape[static_cast<size_t>(axis)], k, i);
      for (int64_t j = 0; j < k; ++j) {
        const HaloInterval& n = needed[static_cast<size_t>(j)];
        if (i != j && std::min(c.offset + c.size, n.end) > std::max(c.offset, n.begin)) {
          return true;
        }
      }
    }
    return false;
  }
  // The box of local device `i` with the exchanged axis replaced by its interval.
  std::pair<std::vector<int64_t>, Shape> box(size_t i) const {
    const int64_t id = mesh.local_device_ids()[i];
    std::vector<int64_t> begin = layout.shard_offset(shape, id);
    Shape extent = layout.shard_shape(shape, id);
    const int64_t c = layout.is_sharded(axis) ? mesh.coord(id, layout.mesh_dim_of(axis)) : 0;
    begin[static_cast<size_t>(axis)] = needed[static_cast<size_t>(c)].begin;
    extent[static_cast<size_t>(axis)] = needed[static_cast<size_t>(c)].size();
    return {begin, extent};
  }
  int64_t coord(size_t i) const {
    const int64_t id = mesh.local_device_ids()[i];
    return layout.is_sharded(axis) ? mesh.coord(id, layout.mesh_dim_of(axis)) : 0;
  }
};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed), meshes_(standard_meshes()) {}

  Case next() {
    const Mesh& mesh = meshes_[static_cast<size_t>(uniform(rng_, 0, 2))];
    const int64_t rank = uniform(rng_, 1, 4);
    std::vector<Layout> layouts = all_layouts(mesh, rank, false);
    Case c{mesh, layouts[static_cast<size_t>(uniform(rng_, 0, layouts.size() - 1))], {}, 0, {}};
    for (int64_t d = 0; d < rank; ++d) c.shape.push_back(uniform(rng_, 1, 6));
    // The exchanged axis is sharded most of the time, with sizes that leave uneven and empty
    // shards (13 over 4, 5 over 8, ...).
    c.axis = uniform(rng_, 0, rank - 1);
    for (int64_t d = 0; d < rank && uniform(rng_, 0, 3) > 0; ++d) {
      if (c.layout.is_sharded(d)) c.axis = d;
    }
    const int64_t n = uniform(rng_, 0, 14);
    c.shape[static_cast<size_t>(c.axis)] = n;
    const int64_t k = c.layout.num_shards(c.axis);
    for (int64_t j = 0; j < k; ++j) {
      // Halos around the own chunk (the conv case) or an arbitrary interval.
      ShardRange own = chunk_range(n, k, j);
      int64_t b = 0, e = 0;
      if (uniform(rng_, 0, 2) > 0) {
        b = std::max<int64_t>(0, own.offset - uniform(rng_, 0, 3));
        e = std::min<int64_t>(n, own.offset + own.size + uniform(rng_, 0, 3));
        if (own.size == 0) b = e = std::min(b, e);
      } else {
        b = uniform(rng_, 0, n);
        e = uniform(rng_, b, n);
      }
      c.needed.push_back({b, e});
    }
    return c;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
  std::vector<Mesh> meshes_;
};

}  // namespace

TEST_CASE("halo_exchange gives every device its interval of the global tensor") {
  Gen gen(17);
  for (int t = 0; t < kCases; ++t) {
    Case c = gen.next();
    INFO(c.describe());
    Tensor global = integer_tensor(c.shape, DType::kF32, gen.rng()());
    DTensor x = distribute(global, c.layout);
    reset_collective_stats();
    std::vector<Tensor> got = halo_exchange(x, c.axis, c.needed);
    CollectiveStats stats = collective_stats();
    INFO(stats.to_string());
    REQUIRE(stats.total() == (c.moves_data() ? 1 : 0));
    REQUIRE(stats.count(CollectiveKind::kAllToAll) == stats.total());
    REQUIRE(got.size() == x.shards().size());
    for (size_t i = 0; i < got.size(); ++i) {
      auto [begin, extent] = c.box(i);
      INFO("local device " << i);
      REQUIRE(got[i].device() == x.shard(static_cast<int64_t>(i)).device());
      REQUIRE(bitwise_equal(got[i], slice_box(global, begin, extent)));
    }
  }
}

TEST_CASE("halo_exchange_adjoint sums every device's values into their owners' rows") {
  Gen gen(18);
  for (int t = 0; t < kCases; ++t) {
    Case c = gen.next();
    INFO(c.describe());
    // One global contribution per shard index, over that shard's interval; every device with
    // that index holds its box of it.
    const int64_t k = c.layout.num_shards(c.axis);
    std::vector<Tensor> contributions;
    Tensor want = Tensor::zeros(c.shape, DType::kF32);
    for (int64_t j = 0; j < k; ++j) {
      Shape s = c.shape;
      s[static_cast<size_t>(c.axis)] = c.needed[static_cast<size_t>(j)].size();
      contributions.push_back(integer_tensor(s, DType::kF32, gen.rng()()));
      std::vector<int64_t> at(s.size(), 0);
      at[static_cast<size_t>(c.axis)] = c.needed[static_cast<size_t>(j)].begin;
      Tensor region = slice_box(want, at, s);
      reduce_into(region, contributions.back(), ReduceOp::kSum);
      copy_box(region, std::vector<int64_t>(s.size(), 0), want, at, s);
    }
    std::vector<Tensor> pieces;
    for (size_t i = 0; i < static_cast<size_t>(c.mesh.num_local_devices()); ++i) {
      auto [begin, extent] = c.box(i);
      begin[static_cast<size_t>(c.axis)] = 0;
      pieces.push_back(slice_box(contributions[static_cast<size_t>(c.coord(i))], begin, extent));
    }
    reset_collective_stats();
    DTensor got = halo_exchange_adjoint(pieces, c.shape, DType::kF32, c.layout, c.axis, c.needed);
    CollectiveStats stats = collective_stats();
    INFO(stats.to_string());
    REQUIRE(stats.total() == (c.moves_data() ? 1 : 0));
    REQUIRE(stats.count(CollectiveKind::kAllToAll) == stats.total());
    REQUIRE(got.layout() == c.layout);
    REQUIRE(bitwise_equal(to_global(got), want));
  }
}

TEST_CASE("halo exchange on a tensor extended by an earlier exchange (H, then W)") {
  // Two sharded dims: after the H exchange the W exchange moves the H-extended rows, so every
  // device ends with its 2-d window, corners included.
  Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  Layout layout({"unsharded", "x", "y", "unsharded"}, mesh);
  const Shape shape{2, 7, 13, 3};
  Tensor global = integer_tensor(shape, DType::kF32, 5);
  DTensor x = distribute(global, layout);
  const std::vector<HaloInterval> rows = {{0, 5}, {3, 7}};
  const std::vector<HaloInterval> cols = {{0, 5}, {3, 9}, {7, 13}, {12, 13}};
  reset_collective_stats();
  std::vector<Tensor> h = halo_exchange(x, 1, rows);
  std::vector<Tensor> hw = halo_exchange(mesh, h, HaloAxis{2, 13, 1}, cols);
  REQUIRE(collective_stats().count(CollectiveKind::kAllToAll) == 2);
  for (size_t i = 0; i < hw.size(); ++i) {
    const int64_t id = mesh.local_device_ids()[i];
    const HaloInterval r = rows[static_cast<size_t>(mesh.coord(id, 0))];
    const HaloInterval w = cols[static_cast<size_t>(mesh.coord(id, 1))];
    REQUIRE(bitwise_equal(hw[i],
                          slice_box(global, {0, r.begin, w.begin, 0}, {2, r.size(), w.size(), 3})));
  }
  // The adjoint of both, W first: each shard gets the sum of every window's values on its rows.
  reset_collective_stats();
  std::vector<Tensor> back_w = halo_exchange_adjoint(mesh, hw, HaloAxis{2, 13, 1}, cols);
  std::vector<Tensor> back = halo_exchange_adjoint(mesh, back_w, HaloAxis{1, 7, 0}, rows);
  REQUIRE(collective_stats().count(CollectiveKind::kAllToAll) == 2);
  // Row r is counted once per window containing it, in each dim.
  Tensor want = global.clone();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t r = 0; r < 7; ++r) {
      for (int64_t w = 0; w < 13; ++w) {
        int64_t times = 0, wtimes = 0;
        for (const HaloInterval& ri : rows) times += ri.begin <= r && r < ri.end;
        for (const HaloInterval& wi : cols) wtimes += wi.begin <= w && w < wi.end;
        for (int64_t ch = 0; ch < 3; ++ch) {
          want.data<float>()[((n * 7 + r) * 13 + w) * 3 + ch] *= static_cast<float>(times * wtimes);
        }
      }
    }
  }
  REQUIRE(bitwise_equal(to_global(DTensor(shape, DType::kF32, layout, back)), want));
}

TEST_CASE("window_shards: each output chunk's input rows, clipped, with the edge padding") {
  std::mt19937_64 rng(3);
  for (int t = 0; t < 2000; ++t) {
    const int64_t filter = uniform(rng, 1, 5), stride = uniform(rng, 1, 3),
                  dilation = uniform(rng, 1, 3), shards = uniform(rng, 1, 8);
    const int64_t span = (filter - 1) * dilation + 1;
    const int64_t in = uniform(rng, 1, 20);
    const int64_t pad_before = uniform(rng, 0, span - 1), pad_after = uniform(rng, 0, span - 1);
    if (in + pad_before + pad_after < span) continue;
    const int64_t out = (in + pad_before + pad_after - span) / stride + 1;
    INFO("in " << in << " out " << out << " filter " << filter << " stride " << stride
               << " dilation " << dilation << " pad " << pad_before << " shards " << shards);
    std::vector<WindowShard> w =
        window_shards(in, out, shards, filter, stride, dilation, pad_before);
    REQUIRE(static_cast<int64_t>(w.size()) == shards);
    for (int64_t c = 0; c < shards; ++c) {
      const WindowShard& s = w[static_cast<size_t>(c)];
      const ShardRange chunk = chunk_range(out, shards, c);
      REQUIRE(s.out == HaloInterval{chunk.offset, chunk.offset + chunk.size});
      if (chunk.size == 0) {
        REQUIRE(s.in.size() == 0);
        continue;
      }
      // Brute force: the rows the chunk's windows touch, inside and outside the tensor.
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (int64_t o = s.out.begin; o < s.out.end; ++o) {
        for (int64_t f = 0; f < filter; ++f) {
          lo = std::min(lo, o * stride - pad_before + f * dilation);
          hi = std::max(hi, o * stride - pad_before + f * dilation + 1);
        }
      }
      REQUIRE(s.in.begin == std::clamp<int64_t>(lo, 0, in));
      REQUIRE(s.in.end == std::clamp<int64_t>(hi, s.in.begin, in));
      REQUIRE(s.pad_before + s.in.size() + s.pad_after == hi - lo);
      REQUIRE((s.pad_before + s.in.size() + s.pad_after - span) / stride + 1 == chunk.size);
    }
  }
  // 13 rows over 4 shards, 3x3 SAME stride 1: each chunk reads a row either side.
  std::vector<WindowShard> w = window_shards(13, 13, 4, 3, 1, 1, 1);
  REQUIRE(w[0].in == HaloInterval{0, 5});
  REQUIRE(w[0].pad_before == 1);
  REQUIRE(w[3].out == HaloInterval{12, 13});
  REQUIRE(w[3].in == HaloInterval{11, 13});
  REQUIRE(w[3].pad_after == 1);
  REQUIRE(window_inputs(w) == std::vector<HaloInterval>{{0, 5}, {3, 9}, {7, 13}, {11, 13}});
}

TEST_CASE("halo exchange errors", "[local]") {
  Mesh mesh = test_mesh({{"x", 4}});
  Layout layout({"x", "unsharded"}, mesh);
  DTensor x = distribute(Tensor::zeros({13, 2}, DType::kF32), layout);
  const std::vector<HaloInterval> ok = {{0, 5}, {3, 9}, {7, 13}, {11, 13}};
  REQUIRE_THROWS_MATCHES(
      halo_exchange(x, 2, ok), InvalidArgumentError,
      Message("[halo_exchange] axis 2 is out of range for f32[13,2] [x,unsharded]"));
  REQUIRE_THROWS_MATCHES(halo_exchange(x, 0, {{0, 5}}), InvalidArgumentError,
                         Message("[halo_exchange] got 1 intervals for the 4 shards of dim 0"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange(x, 0, {{0, 5}, {3, 9}, {7, 14}, {11, 13}}), InvalidArgumentError,
      Message("[halo_exchange] interval [7, 14) of shard 2 is not inside [0, 13) of dim 0"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange(x, 0, {{0, 5}, {3, 2}, {7, 13}, {11, 13}}), InvalidArgumentError,
      Message("[halo_exchange] interval [3, 2) of shard 1 is not inside [0, 13) of dim 0"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange(mesh, x.shards(), HaloAxis{0, 12, 0}, {{0, 5}, {3, 9}, {7, 12}, {11, 12}}),
      ShapeError,
      Message("[halo_exchange] shard f32[4,2]@CPU:0 of local device 0 should have 3 rows along "
              "dim 0"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange(mesh, {x.shard(0)}, HaloAxis{0, 13, 0}, ok), InvalidArgumentError,
      Message("[halo_exchange] got 1 tensors for the 4 local devices of mesh x=4"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange(mesh, x.shards(), HaloAxis{0, 13, 1}, ok), InvalidArgumentError,
      Message("[halo_exchange] dim 0 of size 13 cannot be split along mesh dim 1 of mesh x=4"));
  std::vector<Tensor> pieces = halo_exchange(x, 0, ok);
  REQUIRE_THROWS_MATCHES(halo_exchange_adjoint(pieces, {13, 2}, DType::kF64, layout, 0, ok),
                         DTypeError,
                         Message("[halo_exchange_adjoint] piece f32[5,2]@CPU:0 is not f64"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange_adjoint(x.shards(), {13, 2}, DType::kF32, layout, 0, ok), ShapeError,
      Message("[halo_exchange_adjoint] piece f32[4,2]@CPU:0 of local device 0 should have 5 "
              "rows along dim 0"));
  REQUIRE_THROWS_MATCHES(
      halo_exchange_adjoint(pieces, {13}, DType::kF32, layout, 0, ok), LayoutError,
      Message("[halo_exchange_adjoint] shape [13] has rank 1 but layout [x,unsharded] has rank 2"));
}
