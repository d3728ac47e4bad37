// TensorBoard event files: written records read back with their framing, CRCs and values checked.
#include "cli/tensorboard.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"

using namespace dtensor;
using namespace dtensor::cli;

namespace {

std::string tmp_dir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

}  // namespace

TEST_CASE("TFRecord's masked CRC-32C of known bytes") {
  // crc32c("123456789") = 0xE3069283; masked: rotr15 + 0xa282ead8.
  const uint32_t crc = 0xE3069283u;
  CHECK(masked_crc32c("123456789", 9) == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST_CASE("scalars written to an event file read back with their tags, steps and values") {
  std::string path;
  {
    EventWriter events(tmp_dir("tb/run") + "/nested");
    path = events.path();
    events.scalar("loss/train", 0.5, 1);
    events.scalar("loss/test", 0.25, 1);
    events.scalar("accuracy/train", 0.875, 2);
  }
  CHECK(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  std::string version;
  std::vector<ScalarEvent> read = read_scalar_events(path, &version);
  CHECK(version == "brain.Event:2");
  REQUIRE(read.size() == 3);
  CHECK(read[0].tag == "loss/train");
  CHECK(read[0].value == 0.5f);
  CHECK(read[0].step == 1);
  CHECK(read[1].tag == "loss/test");
  CHECK(read[1].value == 0.25f);
  CHECK(read[2].tag == "accuracy/train");
  CHECK(read[2].step == 2);
  CHECK(read[2].wall_time > 1.6e9);
}

TEST_CASE("a corrupt or truncated event file is an IoError naming the offset") {
  std::string path;
  {
    EventWriter events(tmp_dir("tb/corrupt"));
    path = events.path();
    events.scalar("loss", 1.0, 1);
  }
  const auto size = std::filesystem::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 6));  // inside the last record's data
    f.put('\x7f');
  }
  CHECK_THROWS_AS(read_scalar_events(path), IoError);
  CHECK_THROWS_WITH(read_scalar_events(path), Catch::Matchers::Contains("bad data CRC at offset"));
  std::filesystem::resize_file(path, size - 3);
  CHECK_THROWS_WITH(read_scalar_events(path), Catch::Matchers::Contains("truncated record at"));
}

TEST_CASE("an event folder that cannot be created is an IoError") {
  CHECK_THROWS_AS(EventWriter("/proc/no/logs"), IoError);
}
