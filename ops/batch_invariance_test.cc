// Batch-invariant sums (Stacking::chunk_rows, ops/expand.h): conv2d's filter gradient, float
// reduce_sum/reduce_mean over a leading batch axis, and a whole CNN's gradients give the very
// bits of one device on every in-process split of the batch (1, 2, 4 and 8 devices, uneven and
// misaligned splits, a mesh with a second dim), so towers train exactly like one device. Each
// case also shows that adding per-device partial sums, the obvious way, does not give those bits:
// the test could fail.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"

using namespace dtensor;

namespace {

Tensor normal(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Meshes whose first dim ("batch") splits the batch; the last also has a replicated "model" dim.
std::vector<Mesh> batch_meshes() {
  std::vector<Mesh> meshes;
  for (int64_t n : {1, 2, 4, 8}) meshes.push_back(Mesh::create({{"batch", n}}, DeviceType::kCPU));
  meshes.push_back(Mesh::create({{"batch", 4}, {"model", 2}}, DeviceType::kCPU));
  return meshes;
}

DTensor batch_sharded(const Tensor& t, const Mesh& mesh) {
  return distribute(t, Layout::batch_sharded(mesh, "batch", t.rank()));
}

// The sum of f32 partial results in device order: what a plain all-reduce of per-device sums is.
Tensor add_partials(const std::vector<Tensor>& partials) {
  Tensor sum = partials[0].clone();
  for (size_t i = 1; i < partials.size(); ++i) {
    sum = kernels::binary(kernels::BinaryOp::kAdd, sum, partials[i]);
  }
  return sum;
}

std::string mesh_name(const Mesh& mesh) { return mesh.to_string(); }

}  // namespace

TEST_CASE("a batch-sharded conv2d filter gradient has one device's bits") {
  Conv2dOptions options;
  options.padding.kind = Padding2d::kSame;
  // 128 splits evenly; 100 splits unevenly (13 ... 12); 7 gives some devices no rows.
  for (int64_t n : {128, 100, 7}) {
    const Shape filter = {3, 3, 8, 16};
    const Tensor x = normal({n, 12, 12, 8}, 1), dy = normal({n, 12, 12, 16}, 2);
    const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
    const Tensor want = to_global(
        conv2d_backprop_filter(batch_sharded(x, one), filter, batch_sharded(dy, one), options));
    for (const Mesh& mesh : batch_meshes()) {
      INFO("n = " << n << " on " << mesh_name(mesh));
      const DTensor dw =
          conv2d_backprop_filter(batch_sharded(x, mesh), filter, batch_sharded(dy, mesh), options);
      // The data-parallel sum is still one all-reduce, nothing more.
      reset_collective_stats();
      const Tensor got = to_global(relayout(dw, Layout::replicated(mesh, 4)));
      CHECK(bitwise_equal(got, want));
      const int64_t devices = mesh.dim_size("batch");
      CHECK(collective_stats().count(CollectiveKind::kAllReduce) == (devices > 1 ? 1 : 0));
    }
  }
  // Per-device filter gradients added in device order round differently.
  const Tensor x = normal({128, 12, 12, 8}, 1), dy = normal({128, 12, 12, 16}, 2);
  kernels::Conv2dParams params;
  params.pad_top = params.pad_bottom = params.pad_left = params.pad_right = 1;
  std::vector<Tensor> partials;
  for (int64_t d = 0; d < 8; ++d) {
    partials.push_back(
        kernels::conv2d_backprop_filter(x.leading_view(16 * d, 16 * d + 16).value(), {3, 3, 8, 16},
                                        dy.leading_view(16 * d, 16 * d + 16).value(), params));
  }
  const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  CHECK_FALSE(bitwise_equal(add_partials(partials),
                            to_global(conv2d_backprop_filter(batch_sharded(x, one), {3, 3, 8, 16},
                                                             batch_sharded(dy, one), options))));
}

TEST_CASE("float sums and means over a sharded batch axis have one device's bits") {
  // Large (chunked) and small (put together) sums, over the batch axis alone and with others.
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    bool mean;
  };
  const std::vector<Case> cases = {{{128, 24, 24, 8}, {0, 1, 2}, false},
                                   {{128, 24, 24, 8}, {0, 1, 2}, true},
                                   {{120, 700}, {0}, false},
                                   {{128}, {0}, true},
                                   {{100, 9, 9, 4}, {0, 1, 2}, false},
                                   {{16, 5}, {0}, false}};
  for (const Case& c : cases) {
    const Tensor x = normal(c.shape, 3);
    auto reduce = [&](const DTensor& t) {
      return c.mean ? reduce_mean(t, c.axes) : reduce_sum(t, c.axes);
    };
    const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
    const Tensor want = to_global(reduce(batch_sharded(x, one)));
    for (const Mesh& mesh : batch_meshes()) {
      INFO(shape_to_string(c.shape) << (c.mean ? " mean" : " sum") << " on " << mesh_name(mesh));
      CHECK(bitwise_equal(to_global(reduce(batch_sharded(x, mesh))), want));
    }
  }
  // Per-device bias-gradient sums added in device order round differently.
  const Tensor x = normal({128, 24, 24, 8}, 3);
  std::vector<Tensor> partials;
  for (int64_t d = 0; d < 8; ++d) {
    partials.push_back(kernels::reduce(kernels::ReduceKind::kSum,
                                       x.leading_view(16 * d, 16 * d + 16).value(), {0, 1, 2},
                                       /*keepdims=*/false));
  }
  const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  CHECK_FALSE(bitwise_equal(add_partials(partials),
                            to_global(reduce_sum(batch_sharded(x, one), {0, 1, 2}))));
}

TEST_CASE("a CNN's gradients on towers have one device's bits") {
  // conv, bias, ReLU, max pool, LRN, conv, pool, dense, softmax cross-entropy: every batch sum
  // the tutorial's model makes.
  const int64_t batch = 64;
  const Tensor images = normal({batch, 12, 12, 3}, 4);
  std::vector<int32_t> label_values(batch);
  for (int64_t i = 0; i < batch; ++i) label_values[i] = static_cast<int32_t>((i * 7) % 10);
  Tensor labels = Tensor::empty({batch}, DType::kI32);
  std::copy(label_values.begin(), label_values.end(), labels.data<int32_t>());
  auto gradients = [&](const Mesh& mesh) {
    auto rep = [&](int64_t rank) { return Layout::replicated(mesh, rank); };
    std::vector<DTensor> params = {
        truncated_normal({5, 5, 3, 16}, rep(4), 5, 0.0, 0.05),    fill({16}, rep(1), 0.0),
        truncated_normal({3, 3, 16, 16}, rep(4), 6, 0.0, 0.05),   fill({16}, rep(1), 0.1),
        truncated_normal({3 * 3 * 16, 10}, rep(2), 7, 0.0, 0.04), fill({10}, rep(1), 0.0)};
    GradientTape tape;
    for (const DTensor& p : params) tape.watch(p);
    Conv2dOptions conv;
    conv.padding.kind = Padding2d::kSame;
    Pool2dOptions pool;
    pool.window = {3, 3};
    pool.strides = {2, 2};
    pool.padding.kind = Padding2d::kSame;
    DTensor h = relu(bias_add(conv2d(batch_sharded(images, mesh), params[0], conv), params[1]));
    h = local_response_normalization(max_pool2d(h, pool), 4, 1.0, 0.001 / 9.0, 0.75);
    h = max_pool2d(relu(bias_add(conv2d(h, params[2], conv), params[3])), pool);
    const DTensor logits = bias_add(matmul(flatten(h), params[4]), params[5]);
    const DTensor loss =
        reduce_mean(sparse_softmax_cross_entropy(logits, batch_sharded(labels, mesh)));
    std::vector<Tensor> out = {to_global(loss)};
    for (const DTensor& g : tape.gradient(loss, params)) out.push_back(to_global(g));
    return out;
  };
  const std::vector<Tensor> want = gradients(Mesh::create({{"batch", 1}}, DeviceType::kCPU));
  for (const Mesh& mesh : batch_meshes()) {
    const std::vector<Tensor> got = gradients(mesh);
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(mesh_name(mesh) << ": " << (i == 0 ? "the loss" : "gradient " + std::to_string(i - 1)));
      CHECK(bitwise_equal(got[i], want[i]));
    }
  }
}

TEST_CASE("a batch-sharded embedding gradient (gather's scatter) has one device's bits") {
  // A [vocab, dim] table read at [batch, seq] ids: the scatter adds every row of the batch into
  // the table's gradient, a sum over the batch like a bias gradient's. 128 and 100 (uneven)
  // chunk; 6 is put together.
  const int64_t vocab = 40, dim = 64, seq = 16;
  for (int64_t n : {128, 100, 6}) {
    Tensor ids = Tensor::empty({n, seq}, DType::kI32);
    for (int64_t i = 0; i < ids.num_elements(); ++i) {
      ids.data<int32_t>()[i] = static_cast<int32_t>((i * 13 + i / 7) % vocab);
    }
    const Tensor dy = normal({n, seq, dim}, 8);
    auto table_gradient = [&](const Mesh& mesh) {
      const DTensor table = distribute(normal({vocab, dim}, 9), Layout::replicated(mesh, 2));
      GradientTape tape;
      tape.watch(table);
      const DTensor y = gather(table, batch_sharded(ids, mesh), 0);
      const DTensor loss = reduce_sum(mul(y, batch_sharded(dy, mesh)));
      return to_global(tape.gradient(loss, {table})[0]);
    };
    const Tensor want = table_gradient(Mesh::create({{"batch", 1}}, DeviceType::kCPU));
    for (const Mesh& mesh : batch_meshes()) {
      INFO("n = " << n << " on " << mesh_name(mesh));
      CHECK(bitwise_equal(table_gradient(mesh), want));
    }
  }
  // Per-device scatters added in device order round differently.
  Tensor ids = Tensor::empty({128, seq}, DType::kI32);
  for (int64_t i = 0; i < ids.num_elements(); ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 13 + i / 7) % vocab);
  }
  const Tensor dy = normal({128, seq, dim}, 8);
  std::vector<Tensor> partials;
  for (int64_t d = 0; d < 8; ++d) {
    partials.push_back(kernels::scatter_add({vocab, dim},
                                            ids.leading_view(16 * d, 16 * d + 16).value(),
                                            dy.leading_view(16 * d, 16 * d + 16).value(), 0));
  }
  CHECK_FALSE(
      bitwise_equal(add_partials(partials), kernels::scatter_add({vocab, dim}, ids, dy, 0)));
}
