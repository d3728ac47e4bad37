#include "train/data/dataset.h"

#include <cstdlib>
#include <fstream>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "train/data/idx.h"

using namespace dtensor;
using namespace dtensor::data;
using Catch::Message;

namespace {

constexpr int64_t kWidth = 3;

// Example i has label i and features (10i, 10i+1, 10i+2): a row tells which example it is.
struct Examples {
  Tensor features, labels;
};
Examples examples(int64_t n) {
  Examples e{Tensor::empty({n, kWidth}, DType::kF32), Tensor::empty({n}, DType::kI32)};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < kWidth; ++j) e.features.data<float>()[i * kWidth + j] = 10 * i + j;
    e.labels.data<int32_t>()[i] = static_cast<int32_t>(i);
  }
  return e;
}

Dataset make_dataset(int64_t n, const Mesh& mesh, const std::string& batch_dim = "batch") {
  Examples e = examples(n);
  return Dataset(e.features, e.labels, mesh, batch_dim);
}

Mesh line8() { return Mesh::create({{"batch", 8}}, DeviceType::kCPU); }
Mesh grid24() { return Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU); }

// The example ids of a batch, after checking that its features are those examples' rows.
std::vector<int32_t> ids_of(const Batch& batch) {
  Tensor x = to_global(batch.features), y = to_global(batch.labels);
  REQUIRE(y.shape() == Shape{batch.size});
  REQUIRE(x.shape() == Shape{batch.size, kWidth});
  std::vector<int32_t> ids(y.data<int32_t>(), y.data<int32_t>() + batch.size);
  for (int64_t r = 0; r < batch.size; ++r) {
    for (int64_t j = 0; j < kWidth; ++j) {
      REQUIRE(x.data<float>()[r * kWidth + j] == 10.0f * ids[static_cast<size_t>(r)] + j);
    }
  }
  return ids;
}

// Every remaining batch as (epoch, index, ids).
struct Seen {
  int64_t epoch, index;
  std::vector<int32_t> ids;
  friend bool operator==(const Seen& a, const Seen& b) {
    return a.epoch == b.epoch && a.index == b.index && a.ids == b.ids;
  }
};
std::vector<Seen> drain(Dataset& ds, int64_t max_batches = 1000) {
  std::vector<Seen> out;
  while (auto b = ds.next()) {
    out.push_back({b->epoch, b->index, ids_of(*b)});
    REQUIRE(static_cast<int64_t>(out.size()) <= max_batches);
  }
  return out;
}

std::vector<int32_t> epoch_ids(const std::vector<Seen>& seen, int64_t epoch) {
  std::vector<int32_t> ids;
  for (const Seen& s : seen) {
    if (s.epoch == epoch) ids.insert(ids.end(), s.ids.begin(), s.ids.end());
  }
  return ids;
}

}  // namespace

TEST_CASE("batches cover each example exactly once per epoch") {
  for (bool shuffled : {false, true}) {
    INFO("shuffled " << shuffled);
    Dataset ds = make_dataset(37, line8());
    ds.batch(8).repeat(3);
    if (shuffled) ds.shuffle(5);
    CHECK(ds.batches_per_epoch() == 5);
    std::vector<Seen> seen = drain(ds);
    REQUIRE(seen.size() == 15);
    for (size_t i = 0; i < seen.size(); ++i) {
      CHECK(seen[i].epoch == static_cast<int64_t>(i) / 5);
      CHECK(seen[i].index == static_cast<int64_t>(i) % 5);
      CHECK(seen[i].ids.size() == (i % 5 == 4 ? 5u : 8u));
    }
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int32_t> ids = epoch_ids(seen, epoch);
      CHECK(ids.size() == 37);
      CHECK(std::set<int32_t>(ids.begin(), ids.end()).size() == 37);
      if (!shuffled) {
        for (size_t i = 0; i < ids.size(); ++i) CHECK(ids[i] == static_cast<int32_t>(i));
      }
    }
    CHECK_FALSE(ds.next());  // stays finished
    CHECK(ds.state() == Dataset::State{3, 0});
  }
}

TEST_CASE("one epoch by default, for ever with repeat()") {
  Dataset once = make_dataset(10, line8());
  once.batch(4);
  CHECK(drain(once).size() == 3);
  Dataset forever = make_dataset(10, line8());
  forever.batch(4).repeat();
  for (int i = 0; i < 100; ++i) {
    auto b = forever.next();
    REQUIRE(b);
    CHECK(b->epoch == i / 3);
  }
  Dataset none = make_dataset(10, line8());
  none.batch(4).repeat(0);
  CHECK_FALSE(none.next());
}

TEST_CASE("shuffle is deterministic and differs from epoch to epoch") {
  auto run = [](uint64_t seed) {
    Dataset ds = make_dataset(50, line8());
    ds.shuffle(seed).batch(50).repeat(4);
    return drain(ds);
  };
  std::vector<Seen> a = run(9), b = run(9), c = run(10);
  CHECK(a == b);
  CHECK_FALSE(a == c);
  std::set<std::vector<int32_t>> orders;
  for (const Seen& s : a) orders.insert(s.ids);
  CHECK(orders.size() == 4);  // every epoch in its own order
  // Epoch e uses seed + e.
  CHECK(epoch_ids(a, 1) == epoch_ids(c, 0));
  CHECK(epoch_ids(a, 2) == epoch_ids(c, 1));
}

TEST_CASE("drop_remainder leaves out the short last batch") {
  Dataset ds = make_dataset(37, line8());
  ds.batch(8, /*drop_remainder=*/true).shuffle(1).repeat(2);
  CHECK(ds.batches_per_epoch() == 4);
  std::vector<Seen> seen = drain(ds);
  REQUIRE(seen.size() == 8);
  for (const Seen& s : seen) CHECK(s.ids.size() == 8);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int32_t> ids = epoch_ids(seen, epoch);
    CHECK(std::set<int32_t>(ids.begin(), ids.end()).size() == 32);
  }

  Dataset too_small = make_dataset(5, line8());
  too_small.batch(8, true).repeat();
  CHECK(too_small.batches_per_epoch() == 0);
  CHECK_FALSE(too_small.next());  // no batches at all, even for ever
  Dataset empty = make_dataset(0, line8());
  empty.batch(8).repeat();
  CHECK_FALSE(empty.next());
}

TEST_CASE("uneven batches are sharded by chunks of the batch dim") {
  struct Case {
    Mesh mesh;
    std::string dim;
  };
  for (const Case& c : {Case{line8(), "batch"}, Case{grid24(), "x"}}) {
    INFO(c.mesh.dims_string() << " along " << c.dim);
    for (bool shuffled : {false, true}) {
      Examples e = examples(23);
      Dataset ds(e.features, e.labels, c.mesh, c.dim);
      ds.batch(10);
      if (shuffled) ds.shuffle(3);
      std::vector<int64_t> sizes;
      while (auto b = ds.next()) {
        sizes.push_back(b->size);
        const Layout rows = Layout::batch_sharded(c.mesh, c.dim, 2);
        CHECK(b->features.layout() == rows);
        CHECK(b->labels.layout() == Layout::batch_sharded(c.mesh, c.dim, 1));
        CHECK(b->features.shape() == Shape{b->size, kWidth});
        std::vector<int32_t> ids = ids_of(*b);  // to_global agrees with the example rows
        // Each shard holds its chunk of the batch, and devices along the other dims share it.
        for (int64_t id : c.mesh.local_device_ids()) {
          const Tensor& x = b->features.shard(id);
          const Tensor& y = b->labels.shard(id);
          const ShardRange r = rows.shard_range(b->features.shape(), 0, id);
          REQUIRE(x.shape() == Shape{r.size, kWidth});
          REQUIRE(y.shape() == Shape{r.size});
          CHECK(x.device() == mesh_device(c.mesh, id));
          for (int64_t k = 0; k < r.size; ++k) {
            CHECK(y.data<int32_t>()[k] == ids[static_cast<size_t>(r.offset + k)]);
          }
          const MeshDimMask others = ((1u << c.mesh.rank()) - 1) & ~c.mesh.mask({c.dim});
          for (int64_t other : c.mesh.group(id, others)) {
            CHECK(b->features.shard(other).shares_storage_with(x));
          }
        }
      }
      CHECK(sizes == std::vector<int64_t>{10, 10, 3});
    }
  }
  // The last batch of 3 on 8 devices: chunks of 1, the last five empty.
  Dataset ds = make_dataset(23, line8());
  ds.batch(10).restore({0, 2});
  auto last = ds.next();
  REQUIRE(last);
  for (int64_t id = 0; id < 8; ++id) CHECK(last->labels.shard(id).dim(0) == (id < 3 ? 1 : 0));
}

TEST_CASE("a multi-process mesh copies the rows of local devices only") {
  for (int64_t process : {0, 1}) {
    INFO("process " << process);
    Mesh local = Mesh::create({{"batch", 8}}, DeviceType::kCPU, process, /*num_processes=*/2);
    Examples e = examples(23);
    std::atomic<int64_t> rows_copied{0};
    Dataset ds(e.features, e.labels, local, "batch");
    ds.batch(10).shuffle(4).map([&](Tensor x, Tensor) { rows_copied += x.dim(0); });
    Dataset whole = make_dataset(23, line8());
    whole.batch(10).shuffle(4);
    int64_t expected_rows = 0;
    while (auto b = ds.next()) {
      auto reference = whole.next();
      REQUIRE(reference);
      REQUIRE(b->features.shards().size() == 4);
      CHECK(b->features.shape() == reference->features.shape());
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t id = local.local_device_ids()[static_cast<size_t>(i)];
        CHECK(id == 4 * process + i);
        CHECK(bitwise_equal(b->features.shard(i), reference->features.shard(id)));
        CHECK(bitwise_equal(b->labels.shard(i), reference->labels.shard(id)));
        CHECK(b->features.shard(i).device() == mesh_device(local, id));
        expected_rows += b->features.shard(i).dim(0);
      }
    }
    CHECK_FALSE(whole.next());
    CHECK(rows_copied == expected_rows);
    CHECK(expected_rows < 23);
  }
}

// Raw MNIST-style files of n images of 2x2 pixels (pixel p of image i is (4i + p) % 256) and
// labels i % 10; returns {images, labels}.
std::pair<std::string, std::string> write_raw_mnist(const std::string& prefix, int64_t n) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(dir != nullptr ? dir : "/tmp") + "/" + prefix;
  auto header = [](std::vector<uint8_t> dims) {
    std::vector<uint8_t> out = {0, 0, 8, static_cast<uint8_t>(dims.size())};
    for (uint8_t d : dims) out.insert(out.end(), {0, 0, 0, d});
    return out;
  };
  std::vector<uint8_t> images = header({static_cast<uint8_t>(n), 2, 2});
  std::vector<uint8_t> labels = header({static_cast<uint8_t>(n)});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < 4; ++p) images.push_back(static_cast<uint8_t>((4 * i + p) % 256));
    labels.push_back(static_cast<uint8_t>(i % 10));
  }
  for (const auto& [path, bytes] : {std::make_pair(base + "-images", images),
                                    std::make_pair(base + "-labels", labels)}) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  return {base + "-images", base + "-labels"};
}

TEST_CASE("a file source on a multi-process mesh reads the local devices' images only") {
  auto [images, labels] = write_raw_mnist("dataset-files", 37);
  MnistSplit memory = load_mnist(images, labels);
  for (int64_t process : {0, 1}) {
    INFO("process " << process);
    Mesh local = Mesh::create({{"batch", 8}}, DeviceType::kCPU, process, /*num_processes=*/2);
    auto files = open_mnist_examples(images, labels);
    Dataset ds(files, local, "batch");
    ds.batch(8).shuffle(3).prefetch(2);
    Dataset whole(memory.images, memory.labels, line8(), "batch");
    whole.batch(8).shuffle(3);
    int64_t local_rows = 0;
    while (auto b = ds.next()) {
      auto reference = whole.next();
      REQUIRE(reference);
      CHECK(b->features.shape() == reference->features.shape());
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t id = local.local_device_ids()[static_cast<size_t>(i)];
        CHECK(bitwise_equal(b->features.shard(i), reference->features.shard(id)));
        CHECK(bitwise_equal(b->labels.shard(i), reference->labels.shard(id)));
        local_rows += b->features.shard(i).dim(0);
      }
    }
    CHECK_FALSE(whole.next());
    CHECK(local_rows < 37);
    CHECK(files->bytes_read() == 4 * local_rows);
  }
}

TEST_CASE("cache() reads each example from its source once") {
  auto [images, labels] = write_raw_mnist("dataset-cache", 29);
  for (int64_t process : {0, 1}) {
    INFO("process " << process);
    Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU, process, /*num_processes=*/2);
    auto files = open_mnist_examples(images, labels);
    Dataset cached(files, mesh, "batch");
    cached.shuffle(5).batch(6).repeat(3).cache().prefetch(1);
    auto uncached_files = open_mnist_examples(images, labels);
    Dataset plain(uncached_files, mesh, "batch");
    plain.shuffle(5).batch(6).repeat(3);
    std::set<int> distinct;  // the examples this process received (pixel 0 of image i is 4i/255)
    int64_t rows = 0;
    while (auto b = cached.next()) {
      auto reference = plain.next();
      REQUIRE(reference);
      for (size_t i = 0; i < b->features.shards().size(); ++i) {
        const Tensor& x = b->features.shard(i);
        CHECK(bitwise_equal(x, reference->features.shard(i)));
        CHECK(bitwise_equal(b->labels.shard(i), reference->labels.shard(i)));
        for (int64_t r = 0; r < x.dim(0); ++r) {
          distinct.insert(static_cast<int>(std::lround(x.data<float>()[r * 4] * 255)) / 4);
        }
        rows += x.dim(0);
      }
    }
    CHECK_FALSE(plain.next());
    CHECK(files->bytes_read() == 4 * static_cast<int64_t>(distinct.size()));
    CHECK(uncached_files->bytes_read() == 4 * rows);
    CHECK(rows > static_cast<int64_t>(distinct.size()));
  }
}

TEST_CASE("prefetching yields the same batches as assembling in next()") {
  for (const Mesh& mesh : {line8(), grid24()}) {
    const std::string dim = mesh.rank() == 1 ? "batch" : "x";
    auto run = [&](int64_t depth) {
      Dataset ds = make_dataset(45, mesh, dim);
      ds.shuffle(2).batch(7).repeat(3).cache().prefetch(depth);
      return drain(ds);
    };
    std::vector<Seen> plain = run(0);
    CHECK(plain.size() == 21);
    for (int64_t depth : {1, 2, 5, 100}) {
      INFO("depth " << depth);
      CHECK(run(depth) == plain);
    }
  }
}

TEST_CASE("an exception while assembling a batch reaches next()") {
  for (int64_t depth : {0, 1, 3}) {
    INFO("depth " << depth);
    Dataset ds = make_dataset(20, line8());
    ds.batch(4).prefetch(depth).map([](Tensor, Tensor labels) {
      for (int64_t i = 0; i < labels.dim(0); ++i) {
        if (labels.data<int32_t>()[i] == 13) throw std::runtime_error("bad example 13");
      }
    });
    for (int i = 0; i < 3; ++i) REQUIRE(ds.next());
    CHECK_THROWS_MATCHES(ds.next(), std::runtime_error, Message("bad example 13"));
    CHECK(ds.state() == Dataset::State{0, 3});
    // The position stays at the failed batch: the next call retries it.
    CHECK_THROWS_MATCHES(ds.next(), std::runtime_error, Message("bad example 13"));
    ds.map(nullptr);
    auto b = ds.next();
    REQUIRE(b);
    CHECK(b->index == 3);
    CHECK(ids_of(*b) == std::vector<int32_t>{12, 13, 14, 15});
  }
}

TEST_CASE("destroying a prefetching dataset mid-epoch returns promptly") {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  for (int64_t depth : {1, 4}) {
    {  // The producer waits for room in the queue.
      Dataset ds = make_dataset(1000, line8());
      ds.shuffle(1).batch(16).repeat().prefetch(depth);
      REQUIRE(ds.next());
      REQUIRE(ds.next());
      std::this_thread::sleep_for(milliseconds(5));
    }
    {  // The producer is mid-assembly in a slow map function.
      Dataset ds = make_dataset(1000, grid24(), "x");
      ds.batch(16).repeat().prefetch(depth).map(
          [](Tensor, Tensor) { std::this_thread::sleep_for(milliseconds(2)); });
      REQUIRE(ds.next());
    }
    {  // Configured but never started.
      Dataset ds = make_dataset(10, line8());
      ds.batch(2).prefetch(depth);
    }
    {  // Reconfigured mid-epoch: the old producer stops, the position stays.
      Dataset ds = make_dataset(40, line8());
      ds.batch(4).prefetch(depth);
      REQUIRE(ds.next());
      ds.prefetch(depth + 1);
      auto b = ds.next();
      REQUIRE(b);
      CHECK(b->index == 1);
    }
  }
  CHECK(steady_clock::now() - start < seconds(30));
}

TEST_CASE("state and restore resume at the same batch") {
  auto configure = [](Dataset& ds) { ds.shuffle(7).batch(6).repeat(3).prefetch(2); };
  Dataset first = make_dataset(33, line8());
  configure(first);
  CHECK(first.state() == Dataset::State{0, 0});
  for (int i = 0; i < 8; ++i) REQUIRE(first.next());
  const Dataset::State saved = first.state();
  CHECK(saved == Dataset::State{1, 2});  // 6 batches per epoch
  std::vector<Seen> rest = drain(first);

  Dataset resumed = make_dataset(33, line8());
  configure(resumed);
  resumed.restore(saved);
  CHECK(resumed.state() == saved);
  CHECK(drain(resumed) == rest);

  // Restoring rewinds a running dataset too, and the end of an epoch is the next one's start.
  Dataset again = make_dataset(33, line8());
  configure(again);
  for (int i = 0; i < 6; ++i) REQUIRE(again.next());
  CHECK(again.state() == Dataset::State{1, 0});
  again.restore(saved);
  CHECK(drain(again) == rest);
}

TEST_CASE("a moved dataset keeps its position and its producer") {
  Dataset a = make_dataset(30, line8());
  a.batch(5).prefetch(2);
  REQUIRE(a.next());
  Dataset b = std::move(a);
  auto batch = b.next();
  REQUIRE(batch);
  CHECK(batch->index == 1);
  Dataset c = make_dataset(10, line8());
  c = std::move(b);
  CHECK(c.state() == Dataset::State{0, 2});
  CHECK(drain(c).size() == 4);
}

TEST_CASE("Dataset rejects bad inputs and settings") {
  Examples e = examples(4);
  Mesh mesh = line8();
  CHECK_THROWS_MATCHES(Dataset(e.labels, e.labels, mesh, "batch"), DTypeError,
                       Message("[Dataset] features are i32[4]@CPU:0, expected f32"));
  CHECK_THROWS_MATCHES(tensor_examples(e.labels, e.labels), DTypeError,
                       Message("[tensor_examples] features are i32[4]@CPU:0, expected f32"));
  CHECK_THROWS_MATCHES(Dataset(std::shared_ptr<const ExampleSource>(), mesh, "batch"),
                       InvalidArgumentError, Message("[Dataset] the example source is null"));
  CHECK_THROWS_MATCHES(Dataset(tensor_examples(e.features, e.labels), mesh, "rows"),
                       InvalidArgumentError, Message("[Dataset] mesh batch=8 has no dim 'rows'"));
  CHECK_THROWS_MATCHES(Dataset(e.features, e.features, mesh, "batch"), DTypeError,
                       Message("[Dataset] labels are f32[4,3]@CPU:0, expected i32"));
  CHECK_THROWS_MATCHES(
      Dataset(e.features, Tensor::zeros({5}, DType::kI32), mesh, "batch"), ShapeError,
      Message("[Dataset] labels i32[5]@CPU:0 must be [4] for features f32[4,3]@CPU:0"));
  CHECK_THROWS_MATCHES(
      Dataset(e.features, e.labels.reshaped({4, 1}), mesh, "batch"), ShapeError,
      Message("[Dataset] labels i32[4,1]@CPU:0 must be [4] for features f32[4,3]@CPU:0"));
  CHECK_THROWS_MATCHES(Dataset(Tensor::zeros({}, DType::kF32), e.labels, mesh, "batch"), ShapeError,
                       Message("[Dataset] features f32[]@CPU:0 have no example dim"));
  CHECK_THROWS_MATCHES(Dataset(e.features, e.labels, mesh, "x"), InvalidArgumentError,
                       Message("[Dataset] mesh batch=8 has no dim 'x'"));
  CHECK_THROWS_MATCHES(
      Dataset(e.features.with_device({DeviceType::kGPU, 0}), e.labels, mesh, "batch"),
      InvalidArgumentError, Message("[Dataset] f32[4,3]@GPU:0 is not on the CPU"));
  // A GPU mesh is accepted; without a GPU backend its first batch cannot go onto the devices.
  Dataset on_gpus(e.features, e.labels, Mesh::create({{"batch", 8}}, DeviceType::kGPU), "batch");
  on_gpus.batch(4);
  CHECK_THROWS_MATCHES(on_gpus.next(), UnimplementedError,
                       Message("[copy_to_gpu] has no GPU kernel in this build"));

  Dataset ds(e.features, e.labels, mesh, "batch");
  CHECK_THROWS_MATCHES(ds.next(), InvalidArgumentError,
                       Message("[Dataset::next] no batch size: call batch(global_batch_size) "
                               "first"));
  CHECK_THROWS_MATCHES(ds.restore({0, 0}), InvalidArgumentError,
                       Message("[Dataset::restore] no batch size: call batch(global_batch_size) "
                               "first"));
  CHECK_THROWS_MATCHES(ds.batch(0), InvalidArgumentError,
                       Message("[Dataset::batch] global batch size 0 must be at least 1"));
  CHECK_THROWS_MATCHES(ds.repeat(-2), InvalidArgumentError,
                       Message("[Dataset::repeat] epochs -2 must be -1 (for ever) or at least 0"));
  CHECK_THROWS_MATCHES(ds.prefetch(-1), InvalidArgumentError,
                       Message("[Dataset::prefetch] depth -1 must be at least 0"));
  ds.batch(3, true);
  CHECK_THROWS_MATCHES(ds.restore({0, 1}), InvalidArgumentError,
                       Message("[Dataset::restore] batch 1 is past the end of an epoch of 1 "
                               "batches (4 examples, global batch size 3, remainder dropped)"));
  CHECK_THROWS_MATCHES(ds.restore({-1, 0}), InvalidArgumentError,
                       Message("[Dataset::restore] position (epoch -1, batch 0) is negative"));
  CHECK(ds.mesh() == mesh);
  CHECK(ds.batch_dim() == "batch");
  CHECK(ds.num_examples() == 4);
}
