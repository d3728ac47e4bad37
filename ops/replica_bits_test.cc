// Replicas hold identical bits (issue 25). Devices that differ only along mesh dims a layout
// neither shards nor marks partial hold the same logical shard, so they must hold the same bytes,
// not values equal to rounding: a replicated result that differs in its last bit between devices
// makes training on N devices drift apart. The row-stacked matmul (ops/expand.h, Stacking::rows_of)
// used to put such replicas at different rows of one BLAS call, and OpenBLAS computes a row's bits
// differently at different positions. Swept over meshes, layouts and shapes for f32 and f64; the
// BUILD file runs it on the default backends and with DTENSOR_ONEDNN=0 (f32 on OpenBLAS too).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::test_mesh;

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Tensor t = Tensor::empty(shape, DType::kF64);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = u(rng);
  return kernels::cast(t, dtype);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const size_t bytes = static_cast<size_t>(a.num_elements()) * dtype_size(a.dtype());
  return bytes == 0 || std::memcmp(a.raw_data(), b.raw_data(), bytes) == 0;
}

// The number of local device pairs of `y` that are replicas of each other; fails on the first
// pair whose bytes differ.
int check_replicas(const DTensor& y, const std::string& what) {
  const Layout& layout = y.layout();
  const Mesh& mesh = layout.mesh();
  const MeshDimMask distinct = layout.sharded_mask() | layout.partial_mask();
  const std::vector<int64_t>& ids = mesh.local_device_ids();
  int pairs = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = i + 1; j < ids.size(); ++j) {
      bool replicas = true;
      for (int64_t d = 0; d < mesh.rank(); ++d) {
        if ((distinct >> d) & 1) {
          replicas = replicas && mesh.coord(ids[i], d) == mesh.coord(ids[j], d);
        }
      }
      if (!replicas) continue;
      ++pairs;
      INFO(what << ": devices " << ids[i] << " and " << ids[j] << " of " << y.short_string());
      REQUIRE(same_bytes(y.shard(static_cast<int64_t>(i)), y.shard(static_cast<int64_t>(j))));
    }
  }
  return pairs;
}

// y and y brought to a replicated layout: both must have bit-identical replicas.
int check(const DTensor& y, const std::string& what) {
  const int pairs = check_replicas(y, what);
  check_replicas(relayout(y, Layout::replicated(y.mesh(), y.rank())), what + ", replicated");
  return pairs;
}

std::vector<Mesh> meshes() {
  return {test_mesh({{"a", 2}, {"b", 2}, {"c", 2}}), test_mesh({{"x", 8}}),
          test_mesh({{"x", 2}, {"y", 4}}), test_mesh({{"x", 4}, {"y", 2}})};
}

}  // namespace

TEST_CASE("regression: matmul(flatten(h), w) holds identical replicas on mesh a=2,b=2,c=2") {
  // The case: h f64[3,6,7,1] [c,a,b,unsharded]; device 2 (a=0,b=1,c=0) differed from
  // device 0 (a=0,b=0,c=0) in the last bit. Also MNIST-sized rows (f64 differs there on the
  // AVX-512 hosts, f32 on OpenBLAS at every size).
  const Mesh mesh = test_mesh({{"a", 2}, {"b", 2}, {"c", 2}});
  struct Case {
    Shape h;
    int64_t n;
  };
  const std::vector<Case> cases = {{{3, 6, 7, 1}, 5},      {{3, 6, 7, 1}, 16},
                                   {{3, 6, 7, 1}, 33},     {{3, 6, 7, 1}, 100},
                                   {{64, 28, 28, 1}, 300}, {{27, 28, 28, 1}, 70}};
  for (DType dtype : {DType::kF64, DType::kF32}) {
    for (const Case& c : cases) {
      const int64_t k = c.h[1] * c.h[2] * c.h[3];
      const DTensor h =
          distribute(random_tensor(c.h, dtype, 7), Layout({"c", "a", "b", "unsharded"}, mesh));
      const DTensor w = distribute(random_tensor({k, c.n}, dtype, 8), Layout::replicated(mesh, 2));
      const DTensor y = matmul(flatten(h), w);
      const std::string what = std::string(dtype_name(dtype)) + " h " + shape_to_string(c.h) +
                               " n=" + std::to_string(c.n);
      check(y, what);
      const DTensor z = relayout(y, Layout::replicated(mesh, 2));
      if (mesh.is_local(2) && mesh.is_local(0)) {
        INFO(what);
        CHECK(same_bytes(z.shard(mesh.local_index(2)), z.shard(mesh.local_index(0))));
      }
    }
  }
}

TEST_CASE("matmul and dense hold identical replicas on every mesh, layout and shape") {
  int pairs = 0;
  uint64_t seed = 1;
  for (const Mesh& mesh : meshes()) {
    for (DType dtype : {DType::kF64, DType::kF32}) {
      // flatten(h) @ w for h of rank 4 on every layout.
      for (const Shape& h_shape : {Shape{3, 6, 7, 1}, Shape{5, 3, 4, 2}, Shape{17, 2, 5, 3}}) {
        const int64_t k = h_shape[1] * h_shape[2] * h_shape[3];
        const Tensor hg = random_tensor(h_shape, dtype, ++seed);
        const DTensor w =
            distribute(random_tensor({k, 37}, dtype, ++seed), Layout::replicated(mesh, 2));
        for (const Layout& layout : all_layouts(mesh, 4, false)) {
          const std::string what = std::string(dtype_name(dtype)) + " h " +
                                   shape_to_string(h_shape) + " " + layout.short_string() + " on " +
                                   mesh.dims_string();
          pairs += check(matmul(flatten(distribute(hg, layout)), w), what);
        }
      }
      // x @ w and dense(x, w, b) for x of rank 2 on every layout (partial ones too), w
      // replicated or split by columns.
      for (const Shape& x_shape : {Shape{3, 42}, Shape{13, 100}, Shape{64, 33}, Shape{130, 7}}) {
        const Tensor xg = random_tensor(x_shape, dtype, ++seed);
        const int64_t k = x_shape[1];
        const Tensor wg = random_tensor({k, 21}, dtype, ++seed);
        const DTensor b =
            distribute(random_tensor({21}, dtype, ++seed), Layout::replicated(mesh, 1));
        for (const Layout& w_layout :
             {Layout::replicated(mesh, 2), Layout::inner_sharded(mesh, mesh.dims()[0].name, 2)}) {
          const DTensor w = distribute(wg, w_layout);
          for (const Layout& layout : all_layouts(mesh, 2, true)) {
            const std::string what = std::string(dtype_name(dtype)) + " x " +
                                     shape_to_string(x_shape) + " " + layout.short_string() +
                                     " w " + w_layout.short_string() + " on " + mesh.dims_string();
            // Each replica in its own buffer, as after a relayout (distribute shares them).
            const DTensor x = dtensor::testing::deep_copy(distribute(xg, layout));
            pairs += check(matmul(x, w), what + ", matmul");
            if (!layout.is_partial()) pairs += check(dense(x, w, b), what + ", dense");
          }
        }
      }
    }
  }
  CHECK(pairs > 1000);  // the sweep compared many replicas, not none
}
