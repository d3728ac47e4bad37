#include "train/data/idx.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/data/mnist_dir.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace dtensor;
using namespace dtensor::data;
using Catch::Message;

namespace {

// Matches an exception whose message starts with `prefix` (for messages ending in zlib's words).
class MessageStartsWith : public Catch::MatcherBase<std::exception> {
 public:
  explicit MessageStartsWith(std::string prefix) : prefix_(std::move(prefix)) {}
  bool match(const std::exception& e) const override {
    return std::string(e.what()).compare(0, prefix_.size(), prefix_) == 0;
  }
  std::string describe() const override { return "message starts with \"" + prefix_ + "\""; }

 private:
  std::string prefix_;
};

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Writes `bytes` to `path` with zlib: gzip-compressed, or raw (gzopen's transparent mode).
void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  gzFile f = gzopen(path.c_str(), gzip ? "wb" : "wbT");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(f) == Z_OK);
}

std::vector<uint8_t> idx_header(uint8_t type, const Shape& shape) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(shape.size())};
  for (int64_t d : shape) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  return out;
}

std::vector<uint8_t> pattern(int64_t n, int salt) {
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 37 + salt);
  return out;
}

// An IDX file of unsigned bytes holding `data` of `shape`; returns its path.
std::string write_idx(const std::string& name, const Shape& shape, const std::vector<uint8_t>& data,
                      bool gzip) {
  std::vector<uint8_t> bytes = idx_header(0x08, shape);
  bytes.insert(bytes.end(), data.begin(), data.end());
  std::string path = temp_path(name);
  write_file(path, bytes, gzip);
  return path;
}

// A small MNIST-like pair: n images of 3x4 pixels and n labels.
struct Files {
  std::string images, labels;
};
Files write_mnist(const std::string& prefix, int64_t n, bool gzip) {
  return {write_idx(prefix + "-images", {n, 3, 4}, pattern(n * 12, 1), gzip),
          write_idx(prefix + "-labels", {n}, pattern(n, 5), gzip)};
}

}  // namespace

TEST_CASE("read_idx reads gzip and raw files of any rank from 1 up") {
  for (bool gzip : {true, false}) {
    INFO("gzip " << gzip);
    for (const Shape& shape : {Shape{7}, Shape{5, 3, 4}, Shape{2, 3}, Shape{0, 28, 28}}) {
      INFO(shape_to_string(shape));
      std::vector<uint8_t> data = pattern(num_elements(shape), 3);
      IdxArray array = read_idx(write_idx("round_trip", shape, data, gzip));
      CHECK(array.shape == shape);
      CHECK(array.data == data);
    }
  }
}

TEST_CASE("read_idx reads a file larger than its read chunks") {
  std::vector<uint8_t> data = pattern(3 << 20, 9);  // 3 MiB: several growth steps
  IdxArray array = read_idx(write_idx("big", {3, 1024, 1024}, data, true));
  CHECK(array.shape == Shape{3, 1024, 1024});
  CHECK(array.data == data);
}

TEST_CASE("load_mnist scales images and converts labels") {
  for (bool gzip : {true, false}) {
    Files files = write_mnist("mnist", 6, gzip);
    MnistSplit split = load_mnist(files.images, files.labels);
    REQUIRE(split.images.shape() == Shape{6, 12});
    REQUIRE(split.images.dtype() == DType::kF32);
    REQUIRE(split.labels.shape() == Shape{6});
    REQUIRE(split.labels.dtype() == DType::kI32);
    std::vector<uint8_t> pixels = pattern(72, 1), labels = pattern(6, 5);
    for (int64_t i = 0; i < 72; ++i) {
      CHECK(split.images.data<float>()[i] == static_cast<float>(pixels[i]) / 255.0f);
    }
    for (int64_t i = 0; i < 6; ++i) CHECK(split.labels.data<int32_t>()[i] == labels[i]);
  }
}

TEST_CASE("load_mnist returns the examples [offset, offset + limit)") {
  Files files = write_mnist("range", 10, true);
  MnistSplit all = load_mnist(files.images, files.labels);
  auto check_range = [&](int64_t offset, int64_t limit, int64_t expected_n) {
    INFO("offset " << offset << " limit " << limit);
    MnistSplit part = load_mnist(files.images, files.labels, offset, limit);
    REQUIRE(part.images.shape() == Shape{expected_n, 12});
    REQUIRE(part.labels.shape() == Shape{expected_n});
    for (int64_t i = 0; i < expected_n * 12; ++i) {
      CHECK(part.images.data<float>()[i] == all.images.data<float>()[offset * 12 + i]);
    }
    for (int64_t i = 0; i < expected_n; ++i) {
      CHECK(part.labels.data<int32_t>()[i] == all.labels.data<int32_t>()[offset + i]);
    }
  };
  check_range(0, -1, 10);
  check_range(3, 4, 4);
  check_range(5, -1, 5);
  check_range(9, 1, 1);
  check_range(10, -1, 0);
  check_range(10, 0, 0);
  check_range(0, 10, 10);

  CHECK_THROWS_MATCHES(load_mnist(files.images, files.labels, -1), InvalidArgumentError,
                       Message("[load_mnist] offset -1 is outside [0, 10] (the files hold 10 "
                               "examples)"));
  CHECK_THROWS_MATCHES(load_mnist(files.images, files.labels, 11), InvalidArgumentError,
                       Message("[load_mnist] offset 11 is outside [0, 10] (the files hold 10 "
                               "examples)"));
  CHECK_THROWS_MATCHES(load_mnist(files.images, files.labels, 4, 7), InvalidArgumentError,
                       Message("[load_mnist] examples [4, 11) go past the 10 examples the files "
                               "hold"));
  CHECK_THROWS_MATCHES(load_mnist(files.images, files.labels, 0, -2), InvalidArgumentError,
                       Message("[load_mnist] limit -2 must be -1 (all) or at least 0"));
}

TEST_CASE("open_mnist_dir reads a folder's four files, or splits its t10k pair") {
  const std::string dir = temp_path("mnist_dir");
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  CHECK_FALSE(has_mnist_files(dir));
  CHECK(find_idx_file(dir, "t10k-images-idx3-ubyte").empty());
  CHECK_THROWS_MATCHES(open_mnist_dir(dir, -1, -1, "train"), IoError,
                       Message("[train] no t10k-images-idx3-ubyte[.gz] and "
                               "t10k-labels-idx1-ubyte[.gz] in '" +
                               dir + "'"));

  // Only the t10k pair (gzip): [0, 5000) trains, [5000, 10000) tests.
  write_mnist("mnist_dir/t10k", 10000, true);
  std::rename((dir + "/t10k-images").c_str(), (dir + "/t10k-images-idx3-ubyte.gz").c_str());
  std::rename((dir + "/t10k-labels").c_str(), (dir + "/t10k-labels-idx1-ubyte.gz").c_str());
  CHECK(has_mnist_files(dir));
  MnistDirSplits split = open_mnist_dir(dir);
  CHECK(split.train->num_examples() == 5000);
  CHECK(split.test->num_examples() == 5000);
  CHECK(split.description == "MNIST-format t10k split 5000/5000 in '" + dir + "'");
  int64_t id = 0;
  float pixels[12];
  int32_t label = -1;
  split.test->read(&id, 1, pixels, &label);
  CHECK(label == static_cast<uint8_t>(5000 * 37 + 5));
  CHECK(open_mnist_dir(dir, 10, 7000).test->num_examples() == 5000);

  // The train pair too (raw, preferred over a .gz beside it): every example of each.
  write_mnist("mnist_dir/train", 30, false);
  write_mnist("mnist_dir/gz-train", 20, true);
  for (const char* kind : {"images-idx3-ubyte", "labels-idx1-ubyte"}) {
    const std::string stem = std::string(kind).substr(0, 6);
    std::rename((dir + "/train-" + stem).c_str(), (dir + "/train-" + kind).c_str());
    std::rename((dir + "/gz-train-" + stem).c_str(), (dir + "/train-" + kind + ".gz").c_str());
  }
  CHECK(find_idx_file(dir, "train-images-idx3-ubyte") == dir + "/train-images-idx3-ubyte");
  MnistDirSplits all = open_mnist_dir(dir, -1, 100);
  CHECK(all.train->num_examples() == 30);
  CHECK(all.test->num_examples() == 100);
  CHECK(all.description == "MNIST-format train/t10k in '" + dir + "'");
}

TEST_CASE("read_idx rejects bad files with the file and the problem") {
  for (bool gzip : {true, false}) {
    INFO("gzip " << gzip);
    auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
      std::string path = temp_path(name);
      write_file(path, bytes, gzip);
      return path;
    };
    std::string path;

    path = temp_path("does-not-exist");
    CHECK_THROWS_MATCHES(
        read_idx(path), IoError,
        Message("[read_idx] cannot open '" + path + "': No such file or directory"));

    path = write("empty", {});
    CHECK_THROWS_MATCHES(read_idx(path), IoError,
                         Message("[read_idx] '" + path +
                                 "' is truncated: its header needs 4 bytes, the file has 0"));

    path = write("short-magic", {0, 0});
    CHECK_THROWS_MATCHES(read_idx(path), IoError,
                         Message("[read_idx] '" + path +
                                 "' is truncated: its header needs 4 bytes, the file has 2"));

    path = write("magic", {0x50, 0x4b, 0x03, 0x04, 1, 2, 3});
    CHECK_THROWS_MATCHES(read_idx(path), IoError,
                         Message("[read_idx] '" + path +
                                 "' is not an IDX file: magic number 0x504b0304 does not start "
                                 "with two zero bytes"));

    std::vector<uint8_t> floats = idx_header(0x0d, {2});
    floats.resize(floats.size() + 8);
    path = write("type", floats);
    CHECK_THROWS_MATCHES(read_idx(path), IoError,
                         Message("[read_idx] '" + path +
                                 "' has unsupported type 0x0d (only 0x08, unsigned byte, is "
                                 "supported)"));

    std::vector<uint8_t> header = idx_header(0x08, {10, 28, 28});
    path = write("short-header", std::vector<uint8_t>(header.begin(), header.begin() + 9));
    CHECK_THROWS_MATCHES(read_idx(path), IoError,
                         Message("[read_idx] '" + path +
                                 "' is truncated: its header needs 16 bytes, the file has 9"));

    std::vector<uint8_t> short_data = header;
    short_data.resize(header.size() + 7000);
    path = write("short-data", short_data);
    CHECK_THROWS_MATCHES(read_idx(path), IoError,
                         Message("[read_idx] '" + path +
                                 "' is truncated: shape [10,28,28] needs 7840 bytes of data, the "
                                 "file has 7000"));

    std::vector<uint8_t> long_data = header;
    long_data.resize(header.size() + 7845);
    path = write("long-data", long_data);
    CHECK_THROWS_MATCHES(
        read_idx(path), IoError,
        Message("[read_idx] '" + path + "' has 5 bytes after the end of its [10,28,28] array"));
  }
}

TEST_CASE("read_idx reports a gzip stream cut short as truncated data") {
  std::string full = write_idx("cut-full", {64, 64}, pattern(4096, 2), true);
  gzFile in = gzopen(full.c_str(), "rb");
  REQUIRE(in != nullptr);
  gzclose(in);
  // Copy the compressed bytes and drop the second half.
  FILE* f = std::fopen(full.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<uint8_t> compressed(1 << 16);
  compressed.resize(std::fread(compressed.data(), 1, compressed.size(), f));
  std::fclose(f);
  compressed.resize(compressed.size() / 2);
  std::string cut = temp_path("cut");
  f = std::fopen(cut.c_str(), "wb");
  REQUIRE(std::fwrite(compressed.data(), 1, compressed.size(), f) == compressed.size());
  std::fclose(f);
  CHECK_THROWS_MATCHES(read_idx(cut), IoError,
                       MessageStartsWith("[read_idx] '" + cut +
                                         "' is truncated: shape [64,64] needs 4096 "
                                         "bytes of data, the file has "));
}

TEST_CASE("read_idx reports read errors with the system's reason") {
  std::string dir = temp_path("a-directory");
  mkdir(dir.c_str(), 0700);
  CHECK_THROWS_MATCHES(read_idx(dir), IoError,
                       Message("[read_idx] cannot read '" + dir + "': Is a directory"));

  // A gzip header followed by a corrupt deflate stream.
  std::string bad = temp_path("corrupt.gz");
  FILE* f = std::fopen(bad.c_str(), "wb");
  const uint8_t bytes[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0xff};
  REQUIRE(std::fwrite(bytes, 1, sizeof(bytes), f) == sizeof(bytes));
  std::fclose(f);
  CHECK_THROWS_MATCHES(read_idx(bad), IoError,
                       MessageStartsWith("[read_idx] cannot read '" + bad + "': "));
}

TEST_CASE("load_mnist rejects files that do not form an MNIST split") {
  Files good = write_mnist("good", 4, true);
  std::string flat = write_idx("flat-images", {4, 12}, pattern(48, 0), true);
  std::string two_d_labels = write_idx("2d-labels", {4, 1}, pattern(4, 0), false);
  Files fewer = write_mnist("fewer", 3, false);
  std::string missing = temp_path("no-labels");

  CHECK_THROWS_MATCHES(load_mnist(flat, good.labels), IoError,
                       Message("[load_mnist] '" + flat +
                               "' holds an array of shape [4,12], expected images [n,rows,cols]"));
  CHECK_THROWS_MATCHES(load_mnist(good.images, two_d_labels), IoError,
                       Message("[load_mnist] '" + two_d_labels +
                               "' holds an array of shape [4,1], expected labels [n]"));
  CHECK_THROWS_MATCHES(load_mnist(good.images, fewer.labels), IoError,
                       Message("[load_mnist] '" + good.images + "' holds 4 images but '" +
                               fewer.labels + "' holds 3 labels"));
  CHECK_THROWS_MATCHES(
      load_mnist(good.images, missing), IoError,
      Message("[load_mnist] cannot open '" + missing + "': No such file or directory"));
  // Labels given as images: the shapes tell.
  CHECK_THROWS_MATCHES(load_mnist(good.labels, good.images), IoError,
                       Message("[load_mnist] '" + good.labels +
                               "' holds an array of shape [4], expected images [n,rows,cols]"));
}

TEST_CASE("synthetic_digits: shapes, range, balance") {
  MnistSplit s = synthetic_digits(1003, 7);
  REQUIRE(s.images.shape() == Shape{1003, 784});
  REQUIRE(s.labels.shape() == Shape{1003});
  const float* x = s.images.data<float>();
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < s.images.num_elements(); ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  CHECK(lo == 0.0f);
  CHECK(hi <= 1.0f);
  CHECK(hi > 0.9f);
  std::vector<int> counts(10, 0);
  for (int64_t i = 0; i < 1003; ++i) {
    const int32_t y = s.labels.data<int32_t>()[i];
    REQUIRE(y >= 0);
    REQUIRE(y < 10);
    ++counts[static_cast<size_t>(y)];
    if (i % 10 == 9) {  // every block of ten holds each class once
      for (int c = 0; c < 10; ++c) REQUIRE(counts[static_cast<size_t>(c)] == (i + 1) / 10);
    }
  }
  // Labels are not in a fixed order.
  CHECK_FALSE((s.labels.data<int32_t>()[0] == 0 && s.labels.data<int32_t>()[1] == 1 &&
               s.labels.data<int32_t>()[2] == 2));
  CHECK(synthetic_digits(0, 1).images.shape() == Shape{0, 784});
  CHECK_THROWS_MATCHES(synthetic_digits(-1, 1), InvalidArgumentError,
                       Message("[synthetic_digits] n = -1 must be >= 0"));
}

TEST_CASE("synthetic_digits is deterministic and depends on the seed") {
  MnistSplit a = synthetic_digits(50, 3), b = synthetic_digits(50, 3);
  CHECK(bitwise_equal(a.images, b.images));
  CHECK(bitwise_equal(a.labels, b.labels));
  MnistSplit other = synthetic_digits(50, 4);
  CHECK_FALSE(bitwise_equal(a.images, other.images));
  CHECK_FALSE(bitwise_equal(a.labels, other.labels));
  // Example i depends on (seed, i) only.
  MnistSplit prefix = synthetic_digits(23, 3);
  CHECK(std::equal(prefix.images.data<float>(), prefix.images.data<float>() + 23 * 784,
                   a.images.data<float>()));
  CHECK(std::equal(prefix.labels.data<int32_t>(), prefix.labels.data<int32_t>() + 23,
                   a.labels.data<int32_t>()));
}

// A one-hidden-layer MLP (784-32-10, ReLU, softmax) trained with plain SGD on 2,000 examples.
// The seed experiment's 784-700-500-10 MLP on 5,000 does better still.
TEST_CASE("synthetic_digits is learnable by a small MLP") {
  const int64_t n_train = 2000, n_test = 1000, d = 784, h = 32, k = 10;
  MnistSplit train = synthetic_digits(n_train, 11);
  MnistSplit test = synthetic_digits(n_test, 12);
  std::vector<float> w1(d * h), b1(h, 0.0f), w2(h * k), b2(k, 0.0f);
  uint64_t state = 12345;  // a fixed LCG for the initial weights, uniform in [-scale, scale]
  auto init = [&](std::vector<float>& w, float scale) {
    for (float& v : w) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = scale * (static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2 - 1);
    }
  };
  init(w1, std::sqrt(6.0f / d));
  init(w2, std::sqrt(3.0f / h));
  std::vector<float> hidden(h), logits(k), grad_hidden(h);
  auto forward = [&](const float* x) {
    for (int64_t u = 0; u < h; ++u) {
      float s = b1[u];
      for (int64_t j = 0; j < d; ++j) s += x[j] * w1[j * h + u];
      hidden[u] = std::max(s, 0.0f);
    }
    for (int64_t c = 0; c < k; ++c) {
      float s = b2[c];
      for (int64_t u = 0; u < h; ++u) s += hidden[u] * w2[u * k + c];
      logits[c] = s;
    }
  };
  const float rate = 0.02f;
  for (int epoch = 0; epoch < 4; ++epoch) {
    for (int64_t i = 0; i < n_train; ++i) {
      const float* x = train.images.data<float>() + i * d;
      forward(x);
      const float top = *std::max_element(logits.begin(), logits.end());
      float sum = 0;
      for (float& l : logits) sum += (l = std::exp(l - top));
      std::fill(grad_hidden.begin(), grad_hidden.end(), 0.0f);
      for (int64_t c = 0; c < k; ++c) {
        const float g = logits[c] / sum - (c == train.labels.data<int32_t>()[i] ? 1.0f : 0.0f);
        b2[c] -= rate * g;
        for (int64_t u = 0; u < h; ++u) {
          grad_hidden[u] += g * w2[u * k + c];
          w2[u * k + c] -= rate * g * hidden[u];
        }
      }
      for (int64_t u = 0; u < h; ++u) {
        if (hidden[u] <= 0) continue;
        b1[u] -= rate * grad_hidden[u];
        for (int64_t j = 0; j < d; ++j) w1[j * h + u] -= rate * grad_hidden[u] * x[j];
      }
    }
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < n_test; ++i) {
    forward(test.images.data<float>() + i * d);
    const int64_t guess = std::max_element(logits.begin(), logits.end()) - logits.begin();
    correct += guess == test.labels.data<int32_t>()[i];
  }
  const double accuracy = static_cast<double>(correct) / n_test;
  INFO("MLP test accuracy " << accuracy);
  CHECK(accuracy > 0.9);
}

TEST_CASE("open_mnist_examples reads the examples load_mnist loads, on demand for raw files") {
  for (bool gzip : {false, true}) {
    INFO("gzip " << gzip);
    Files files = write_mnist(gzip ? "ondemand-gz" : "ondemand-raw", 9, gzip);
    MnistSplit whole = load_mnist(files.images, files.labels, 2, 6);
    auto source = open_mnist_examples(files.images, files.labels, 2, 6);
    CHECK(source->reads_on_demand() == !gzip);
    CHECK(source->num_examples() == 6);
    CHECK(source->example_shape() == Shape{12});
    CHECK(source->bytes_read() == 0);  // opening reads headers and labels only
    // A shuffled request with a run of consecutive examples in it.
    const std::vector<int64_t> ids = {4, 0, 1, 2, 5};
    std::vector<float> x(ids.size() * 12);
    std::vector<int32_t> y(ids.size());
    source->read(ids.data(), static_cast<int64_t>(ids.size()), x.data(), y.data());
    for (size_t j = 0; j < ids.size(); ++j) {
      CHECK(y[j] == whole.labels.data<int32_t>()[ids[j]]);
      for (int64_t p = 0; p < 12; ++p) {
        REQUIRE(x[j * 12 + static_cast<size_t>(p)] == whole.images.data<float>()[ids[j] * 12 + p]);
      }
    }
    CHECK(source->bytes_read() == (gzip ? 0 : 5 * 12));
  }
}

TEST_CASE("open_mnist_examples rejects bad files as load_mnist does") {
  Files good = write_mnist("src-good", 4, false);
  std::vector<uint8_t> short_data = idx_header(0x08, {4, 3, 4});
  std::vector<uint8_t> pixels = pattern(47, 0);
  short_data.insert(short_data.end(), pixels.begin(), pixels.end());
  std::string truncated = temp_path("src-truncated");
  write_file(truncated, short_data, false);
  std::vector<uint8_t> long_data = short_data;
  long_data.push_back(1);
  long_data.push_back(2);
  std::string trailing = temp_path("src-trailing");
  write_file(trailing, long_data, false);
  Files fewer = write_mnist("src-fewer", 3, false);
  std::string bad_magic = temp_path("src-magic");
  write_file(bad_magic, {1, 2, 8, 3, 0, 0, 0, 0}, false);

  CHECK_THROWS_MATCHES(open_mnist_examples(truncated, good.labels), IoError,
                       Message("[open_mnist_examples] '" + truncated +
                               "' is truncated: shape [4,3,4] needs 48 bytes of data, the file "
                               "has 47"));
  CHECK_THROWS_MATCHES(open_mnist_examples(trailing, good.labels), IoError,
                       Message("[open_mnist_examples] '" + trailing +
                               "' has 1 bytes after the end of its [4,3,4] array"));
  CHECK_THROWS_MATCHES(open_mnist_examples(good.images, fewer.labels), IoError,
                       Message("[open_mnist_examples] '" + good.images + "' holds 4 images but '" +
                               fewer.labels + "' holds 3 labels"));
  CHECK_THROWS_MATCHES(open_mnist_examples(bad_magic, good.labels), IoError,
                       Message("[open_mnist_examples] '" + bad_magic +
                               "' is not an IDX file: magic number 0x01020803 does not start "
                               "with two zero bytes"));
  CHECK_THROWS_MATCHES(open_mnist_examples(good.images, good.labels, 1, 4), InvalidArgumentError,
                       Message("[open_mnist_examples] examples [1, 5) go past the 4 examples the "
                               "files hold"));
  CHECK_THROWS_MATCHES(open_mnist_examples(good.images, good.labels, 0, -2), InvalidArgumentError,
                       Message("[open_mnist_examples] limit -2 must be -1 (all) or at least 0"));

  // A file that shrinks after opening fails the read, not the process.
  Files shrinking = write_mnist("src-shrinking", 4, false);
  auto source = open_mnist_examples(shrinking.images, shrinking.labels);
  REQUIRE(::truncate(shrinking.images.c_str(), 20) == 0);
  std::vector<float> x(12);
  std::vector<int32_t> y(1);
  const int64_t last = 3;
  CHECK_THROWS_MATCHES(source->read(&last, 1, x.data(), y.data()), IoError,
                       Message("[MnistFileExamples::read] cannot read '" + shrinking.images +
                               "': the file is shorter than when it was opened"));
}

TEST_CASE("read_idx rejects a rank-0 array") {
  const std::string path = write_idx("rank0", {}, {42}, false);
  CHECK_THROWS_MATCHES(
      read_idx(path), IoError,
      Message("[read_idx] '" + path + "' declares an array of rank 0 (an IDX array has dims)"));
}

TEST_CASE("zero images of 2^32-1 x 2^32-1 pixels cannot overflow rows * cols") {
  const int64_t side = 0xffffffff;
  Files files{write_idx("huge-empty-images", {0, side, side}, {}, false),
              write_idx("huge-empty-labels", {0}, {}, false)};
  const std::string message =
      "' declares a shape [0,4294967295,4294967295] of more than 2^62 "
      "elements in its non-zero dims";
  CHECK_THROWS_MATCHES(read_idx(files.images), IoError,
                       Message("[read_idx] '" + files.images + message));
  CHECK_THROWS_MATCHES(load_mnist(files.images, files.labels), IoError,
                       Message("[load_mnist] '" + files.images + message));
  CHECK_THROWS_MATCHES(open_mnist_examples(files.images, files.labels), IoError,
                       Message("[open_mnist_examples] '" + files.images + message));
  // Zero images of a size that fits load as an empty split.
  Files empty{write_idx("empty-images", {0, 3, 4}, {}, false), files.labels};
  MnistSplit split = load_mnist(empty.images, empty.labels);
  CHECK(split.images.shape() == Shape{0, 12});
}
