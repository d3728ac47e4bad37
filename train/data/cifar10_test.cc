#include "train/data/cifar10.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "train/data/dataset.h"

using namespace dtensor;
using namespace dtensor::data;
using Catch::Message;

namespace {

// A fresh folder under TEST_TMPDIR.
std::string make_folder(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  ::mkdir(path.c_str(), 0755);
  return path;
}

// The byte of channel c at pixel p of example i: it tells example, channel and pixel apart.
uint8_t pixel(int64_t i, int64_t c, int64_t p) {
  return static_cast<uint8_t>((7 * i + 85 * c + p) % 256);
}

// Writes records [first, first + n) (label i % 10) to folder/name.
void write_records(const std::string& folder, const std::string& name, int64_t first, int64_t n) {
  std::vector<uint8_t> bytes;
  for (int64_t i = first; i < first + n; ++i) {
    bytes.push_back(static_cast<uint8_t>(i % 10));
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t p = 0; p < 1024; ++p) bytes.push_back(pixel(i, c, p));
    }
  }
  std::ofstream out(folder + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A CIFAR-10 folder whose five training files hold 3, 2, 4, 1, 3 records and test file 5.
std::string write_cifar(const std::string& name) {
  const std::string folder = make_folder(name);
  const int64_t sizes[] = {3, 2, 4, 1, 3};
  int64_t first = 0;
  for (int b = 0; b < 5; ++b) {
    write_records(folder, "data_batch_" + std::to_string(b + 1) + ".bin", first, sizes[b]);
    first += sizes[b];
  }
  write_records(folder, "test_batch.bin", 100, 5);
  return folder;
}

// Checks that row r of `features` (f32 [32, 32, 3] each) is example i in channels-last order.
void check_example(const float* features, int64_t r, int64_t i) {
  for (int64_t p = 0; p < 1024; ++p) {
    for (int64_t c = 0; c < 3; ++c) {
      REQUIRE(features[(r * 1024 + p) * 3 + c] == static_cast<float>(pixel(i, c, p)) / 255.0f);
    }
  }
}

}  // namespace

TEST_CASE("CIFAR-10 records come out channels-last, scaled to [0, 1], across files") {
  const std::string folder = write_cifar("cifar-read");
  auto train = open_cifar10_examples(folder, Cifar10Split::kTrain);
  CHECK(train->num_examples() == 13);
  CHECK(train->example_shape() == Shape{32, 32, 3});
  // A run across the boundary of files 1 and 2, one in file 3, out of order, the last record.
  const std::vector<int64_t> ids = {1, 2, 3, 4, 12, 7, 0};
  std::vector<float> features(ids.size() * 3072);
  std::vector<int32_t> labels(ids.size());
  train->read(ids.data(), static_cast<int64_t>(ids.size()), features.data(), labels.data());
  for (size_t r = 0; r < ids.size(); ++r) {
    CHECK(labels[r] == ids[r] % 10);
    check_example(features.data(), static_cast<int64_t>(r), ids[r]);
  }
  CHECK(train->bytes_read() == 7 * 3073);

  auto test = open_cifar10_examples(folder + "/", Cifar10Split::kTest);
  CHECK(test->num_examples() == 5);
  const int64_t id = 4;
  int32_t label = -1;
  test->read(&id, 1, features.data(), &label);
  CHECK(label == 104 % 10);
  check_example(features.data(), 0, 104);
}

TEST_CASE("a CIFAR-10 Dataset on a multi-process mesh reads the local devices' records only") {
  const std::string folder = write_cifar("cifar-dataset");
  for (int64_t process : {0, 1}) {
    INFO("process " << process);
    Mesh local = Mesh::create({{"batch", 4}}, DeviceType::kCPU, process, /*num_processes=*/2);
    auto files = open_cifar10_examples(folder, Cifar10Split::kTrain);
    Dataset ds(files, local, "batch");
    ds.batch(4).shuffle(5);
    int64_t local_rows = 0;
    while (auto b = ds.next()) {
      CHECK(b->features.shape() == Shape{b->size, 32, 32, 3});
      for (int64_t i = 0; i < 2; ++i) {
        const Tensor x = b->features.shard(i), y = b->labels.shard(i);
        for (int64_t r = 0; r < y.dim(0); ++r) {
          // The first byte of example i < 13 is 7i.
          const auto i_of = static_cast<int64_t>(x.data<float>()[r * 3072] * 255.0f + 0.5f) / 7;
          CHECK(y.data<int32_t>()[r] == i_of % 10);
          check_example(x.data<float>(), r, i_of);
        }
        local_rows += y.dim(0);
      }
    }
    CHECK(local_rows < 13);
    CHECK(files->bytes_read() == 3073 * local_rows);
  }
}

TEST_CASE("open_cifar10_examples rejects missing, empty and truncated files") {
  const std::string missing = make_folder("cifar-errors") + "/none";
  CHECK_THROWS_MATCHES(open_cifar10_examples(missing, Cifar10Split::kTrain), IoError,
                       Message("[open_cifar10_examples] cannot open folder '" + missing +
                               "': No such file or directory"));

  const std::string empty = make_folder("cifar-empty");
  CHECK_THROWS_MATCHES(open_cifar10_examples(empty, Cifar10Split::kTest), IoError,
                       Message("[open_cifar10_examples] folder '" + empty +
                               "' is empty: expected the CIFAR-10 binary files data_batch_1.bin "
                               ".. data_batch_5.bin and test_batch.bin"));

  const std::string partial = make_folder("cifar-partial");
  write_records(partial, "data_batch_1.bin", 0, 1);
  write_records(partial, "data_batch_2.bin", 1, 1);
  CHECK_THROWS_MATCHES(open_cifar10_examples(partial, Cifar10Split::kTrain), IoError,
                       Message("[open_cifar10_examples] cannot open '" + partial +
                               "/data_batch_3.bin': No such file or directory"));
  CHECK_THROWS_MATCHES(open_cifar10_examples(partial, Cifar10Split::kTest), IoError,
                       Message("[open_cifar10_examples] cannot open '" + partial +
                               "/test_batch.bin': No such file or directory"));

  const std::string folder = write_cifar("cifar-truncated");
  std::vector<uint8_t> bytes(2 * 3073 + 100, 1);
  write_bytes(folder + "/data_batch_4.bin", bytes);
  CHECK_THROWS_MATCHES(open_cifar10_examples(folder, Cifar10Split::kTrain), IoError,
                       Message("[open_cifar10_examples] '" + folder +
                               "/data_batch_4.bin' has 6246 bytes, not a multiple of the "
                               "3073-byte record (a label byte and 3072 pixels): truncated after "
                               "record 2"));
  write_bytes(folder + "/test_batch.bin", {});
  CHECK_THROWS_MATCHES(
      open_cifar10_examples(folder, Cifar10Split::kTest), IoError,
      Message("[open_cifar10_examples] '" + folder + "/test_batch.bin' holds no records"));
}

TEST_CASE("a CIFAR-10 label outside 0..9 names its file and record") {
  const std::string folder = write_cifar("cifar-label");
  std::vector<uint8_t> bytes(3 * 3073, 0);
  bytes[2 * 3073] = 10;  // record 2 of data_batch_3.bin: example 7
  write_bytes(folder + "/data_batch_3.bin", bytes);
  auto train = open_cifar10_examples(folder, Cifar10Split::kTrain);
  std::vector<float> features(3 * 3072);
  std::vector<int32_t> labels(3);
  const std::vector<int64_t> good = {5, 6, 1};
  train->read(good.data(), 3, features.data(), labels.data());
  CHECK(labels == std::vector<int32_t>{0, 0, 1});
  const std::vector<int64_t> bad = {6, 7};
  CHECK_THROWS_MATCHES(train->read(bad.data(), 2, features.data(), labels.data()), IoError,
                       Message("[Cifar10FileExamples::read] '" + folder +
                               "/data_batch_3.bin' record 2 has label 10, expected 0..9"));
}
