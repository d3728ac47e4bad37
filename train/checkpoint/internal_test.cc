// Unit tests of the pieces under the checkpoint: CRC-32C, boxes, the safetensors header, the
// index.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <random>

#include "runtime/crc32c.h"
#include "runtime/error.h"
#include "train/checkpoint/internal/boxes.h"
#include "train/checkpoint/internal/index.h"
#include "train/checkpoint/internal/json_util.h"
#include "train/checkpoint/internal/safetensors.h"

using namespace dtensor;
using namespace dtensor::checkpoint_internal;
using Catch::Message;

TEST_CASE("crc32c matches the published check values") {
  const char* check = "123456789";
  CHECK(crc32c(check, 9) == 0xE3069283u);
  CHECK(crc32c_extend_portable(0, check, 9) == 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  // RFC 3720, appendix B.4.
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(down.data(), 32) == 0x113FDB5Cu);
  CHECK(crc32c(nullptr, 0) == 0);
}

TEST_CASE("crc32c: the hardware path, extension and combination agree with the portable one") {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> data(200000 + 64);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{100}, size_t{24575},
                   size_t{24576}, size_t{24583}, size_t{49152 + 13}, size_t{200000}}) {
    for (size_t align = 0; align < 3; ++align) {
      INFO("n " << n << " align " << align);
      const uint8_t* p = data.data() + align;
      const uint32_t expected = crc32c_extend_portable(0, p, n);
      CHECK(crc32c(p, n) == expected);
      const size_t cut = n / 3;
      CHECK(crc32c_extend(crc32c(p, cut), p + cut, n - cut) == expected);
      CHECK(crc32c_combine(crc32c(p, cut), crc32c(p + cut, n - cut), n - cut) == expected);
    }
  }
}

TEST_CASE("boxes: intersection, contiguity and region copies") {
  Box a{{0, 2}, {4, 5}}, b{{2, 0}, {3, 4}};
  auto i = intersect(a, b);
  REQUIRE(i);
  CHECK(*i == Box{{2, 2}, {2, 2}});
  CHECK_FALSE(intersect(a, Box{{4, 0}, {1, 9}}));
  CHECK(is_contiguous_in(Box{{0, 0}, {4, 6}}, Box{{1, 0}, {2, 6}}));
  CHECK(is_contiguous_in(Box{{0, 0}, {4, 6}}, Box{{1, 2}, {1, 3}}));
  CHECK_FALSE(is_contiguous_in(Box{{0, 0}, {4, 6}}, Box{{1, 2}, {2, 3}}));
  CHECK(covering_range(Box{{0, 0}, {4, 6}}, Box{{1, 2}, {2, 3}}) ==
        (std::pair<uint64_t, uint64_t>{8, 17}));

  // Global [6,7] tensor with value 100*r + c; copy the overlap of two boxes, the source held
  // from element 5 on.
  Box src{{1, 1}, {4, 5}}, dst{{2, 0}, {4, 4}};
  std::vector<int32_t> src_data(20), dst_data(16, -1);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 5; ++c) src_data[r * 5 + c] = 100 * (r + 1) + (c + 1);
  }
  auto region = intersect(src, dst);
  REQUIRE(region);
  copy_region(reinterpret_cast<const char*>(src_data.data() + 5), src, 5,
              reinterpret_cast<char*>(dst_data.data()), dst, *region, 4);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) {
      const int gr = r + 2, gc = c;
      const bool inside = gr >= 2 && gr < 5 && gc >= 1 && gc < 4;
      CHECK(dst_data[r * 4 + c] == (inside ? 100 * gr + gc : -1));
    }
  }
}

TEST_CASE("safetensors headers round trip and malformed ones are refused") {
  std::vector<SafetensorsEntry> entries = {{"a@0", DType::kF32, {2, 3}, 0, 24},
                                           {"b", DType::kBF16, {5}, 24, 34},
                                           {"c", DType::kBool, {}, 34, 35}};
  std::string bytes = encode_safetensors_header(entries, {{"format", "x"}});
  CHECK(bytes.size() % kDataAlignment == 0);
  const uint64_t n = decode_header_length(bytes.data());
  CHECK(n + 8 == bytes.size());
  SafetensorsHeader h = decode_safetensors_header(std::string_view(bytes).substr(8), "f", "test");
  CHECK(h.metadata.at("format") == "x");
  CHECK(h.data_start == bytes.size());
  CHECK(h.data_size == 35);
  REQUIRE(h.entries.size() == 3);
  CHECK(h.entries[1].key == "b");
  CHECK(h.entries[1].dtype == DType::kBF16);
  CHECK(h.entries[2].shape.empty());

  CHECK_THROWS_MATCHES(
      decode_safetensors_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "f",
                                "test"),
      IoError,
      Message("[test] corrupt safetensors header in f: tensor 'a' spans 4 bytes for 8 "
              "bytes of data"));
  CHECK_THROWS_MATCHES(
      decode_safetensors_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "f",
                                "test"),
      IoError,
      Message("[test] corrupt safetensors header in f: tensor 'a' does not start where "
              "the previous one ends"));
  CHECK_THROWS_MATCHES(
      decode_safetensors_header(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "f",
                                "test"),
      IoError,
      Message("[test] corrupt safetensors header in f: tensor 'a' has unsupported dtype "
              "\"U8\""));
}

TEST_CASE("index: encoding round trips, tampering and bad tilings are refused") {
  Index index;
  index.save_id = "00ff";
  index.checksum_block_bytes = 4;
  index.files.push_back({"f.safetensors", 100, 64, 1, 2});
  VariableRecord v;
  v.dtype = DType::kI32;
  v.shape = {3, 2};
  v.layout = "L";
  v.shards.push_back({0, "v@0,0", {{0, 0}, {2, 2}}, 0, 16, {1, 2, 3, 4}});
  v.shards.push_back({0, "v@2,0", {{2, 0}, {1, 2}}, 16, 24, {5, 6}});
  index.variables["v"] = v;
  index.optimizers["opt"] = {5, {"opt/v/m"}};
  index.datasets["d"] = {1, 2};
  index.ints["i"] = -3;
  const std::string text = encode_index(index);
  Index back = decode_index(text, "p", "test");
  CHECK(back.variables.at("v").shards[1].box == Box{{2, 0}, {1, 2}});
  CHECK(back.variables.at("v").shards[1].crc32c == std::vector<uint32_t>{5, 6});
  CHECK(back.optimizers.at("opt").step == 5);
  CHECK(back.datasets.at("d").batch == 2);
  CHECK(back.ints.at("i") == -3);
  check_tiling("v", back.variables.at("v"), "p", "test");

  std::string tampered = text;
  tampered[tampered.find("\"step\":5") + 7] = '6';
  CHECK_THROWS_MATCHES(decode_index(tampered, "p", "test"), IoError,
                       Message("[test] corrupt index p: checksum mismatch"));

  VariableRecord overlapping = v;
  overlapping.shards[1].box = {{1, 0}, {1, 2}};
  CHECK_THROWS_MATCHES(check_tiling("v", overlapping, "p", "test"), IoError,
                       Message("[test] corrupt index p: variable 'v' shards v@0,0 and v@2,0 "
                               "overlap"));
  VariableRecord gap = v;
  gap.shards.pop_back();
  CHECK_THROWS_MATCHES(check_tiling("v", gap, "p", "test"), IoError,
                       Message("[test] corrupt index p: variable 'v' shards cover 4 of its 6 "
                               "elements"));
}

TEST_CASE("check_tiling: an offset + shape that overflows cannot fake coverage") {
  VariableRecord v;
  v.dtype = DType::kI32;
  v.shape = {6, 5};
  const int64_t huge = std::numeric_limits<int64_t>::max();
  v.shards.push_back({0, "a", {{0, 0}, {3, 5}}, 0, 60, {1}});
  // Wraps to a negative end: passed as "inside", overlapped nothing, and added its 15 elements.
  v.shards.push_back({0, "b", {{huge, 0}, {3, 5}}, 60, 120, {2}});
  CHECK_THROWS_MATCHES(check_tiling("v", v, "p", "test"), IoError,
                       Message("[test] corrupt index p: variable 'v' shard b at "
                               "[9223372036854775807,0] of shape [3,5] lies outside [6,5]"));
}

TEST_CASE("check_tiling: a shape of 2^64 elements is refused, not wrapped to zero bytes") {
  VariableRecord v;
  v.dtype = DType::kF32;
  v.shape = {int64_t{1} << 32, int64_t{1} << 32};
  v.shards.push_back({0, "a", {{0, 0}, v.shape}, 0, 0, {}});
  CHECK_THROWS_MATCHES(check_tiling("v", v, "p", "test"), IoError,
                       Message("[test] corrupt index p: variable 'v' has shape "
                               "[4294967296,4294967296], more than 2^63 bytes"));
}

TEST_CASE("safetensors headers: dims past int64 and element counts past 2^63 are refused") {
  CHECK_THROWS_MATCHES(
      decode_safetensors_header(
          R"({"a":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})", "f",
          "test"),
      IoError,
      Message("[test] corrupt safetensors header in f: tensor 'a' shape[0] must be an integer in "
              "[0, 9223372036854775807], not 9223372036854775808"));
  CHECK_THROWS_MATCHES(
      decode_safetensors_header(
          R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "f",
          "test"),
      IoError,
      Message("[test] corrupt safetensors header in f: tensor 'a' has shape "
              "[4294967296,4294967296], more than 2^63 bytes"));
  CHECK_THROWS_MATCHES(
      decode_safetensors_header(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "f",
                                "test"),
      IoError,
      Message("[test] corrupt safetensors header in f: tensor 'a' shape[0] must be an integer in "
              "[0, 9223372036854775807], not 1.5"));
}

TEST_CASE("safetensors headers and indexes nested too deeply are refused before parsing") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THROWS_MATCHES(decode_safetensors_header(deep, "f", "test"), IoError,
                       Message("[test] corrupt safetensors header in f: JSON nests deeper than "
                               "32 levels (at byte 32)"));
  CHECK_THROWS_MATCHES(decode_index("{\"a\":" + deep + "}", "p", "test"), IoError,
                       Message("[test] corrupt index p: JSON nests deeper than 32 levels (at "
                               "byte 36)"));
  // Brackets inside strings do not count.
  CHECK_NOTHROW(check_json_depth("[\"" + std::string(100, '[') + "\\\"\"]"));
}

TEST_CASE("index: a version of 1e300 is refused by the checked number accessor") {
  CHECK_THROWS_MATCHES(
      decode_index(R"({"format":"dtensor-checkpoint","version":1e300})", "p", "test"), IoError,
      Message("[test] corrupt index p: version must be an integer in "
              "[-9223372036854775808, 9223372036854775807], not 1e+300"));
}

TEST_CASE("index: a checksum block size past 2^48 is refused") {
  Index index;
  index.checksum_block_bytes = (uint64_t{1} << 48) + 1;
  CHECK_THROWS_MATCHES(decode_index(encode_index(index), "p", "test"), IoError,
                       Message("[test] corrupt index p: checksum_block_bytes must be an integer in "
                               "[0, 281474976710656], not 281474976710657"));
}
