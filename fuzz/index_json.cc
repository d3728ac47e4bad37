// Fuzzes the index and per-process part readers. The input is tried as it is, and (if it is a
// JSON object) resealed with a valid index_crc32c, so that mutations get past the checksum to the
// structural checks. Properties: an index that decodes re-encodes to itself; check_tiling on
// every variable either passes or throws IoError.
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/harness.h"
#include "runtime/crc32c.h"
#include "train/checkpoint/internal/index.h"
#include "train/checkpoint/internal/json_util.h"

namespace {

using namespace dtensor;
using namespace dtensor::checkpoint_internal;

// The input with index_crc32c recomputed, or "" if it is not a JSON object.
std::string resealed(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_untrusted_json(text);
  } catch (const std::exception&) {
    return "";
  }
  if (!j.is_object()) return "";
  j.erase("index_crc32c");
  const std::string body = j.dump();
  j["index_crc32c"] = crc32c(body.data(), body.size());
  return j.dump();
}

void check_index(const std::string& text) {
  fuzz::accept_dtensor_errors([&] {
    const Index index = decode_index(text, "fuzz", "fuzz");
    const std::string encoded = encode_index(index);
    Index back;
    try {
      back = decode_index(encoded, "fuzz", "fuzz");
    } catch (const Error& e) {
      fuzz::finding(std::string("a re-encoded index does not decode: ") + e.what());
    }
    if (encode_index(back) != encoded) fuzz::finding("an index does not round-trip");
    for (const auto& entry : index.variables) {
      fuzz::accept_dtensor_errors([&] { check_tiling(entry.first, entry.second, "fuzz", "fuzz"); });
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_index(text);
  const std::string sealed = resealed(text);
  if (!sealed.empty()) check_index(sealed);
  fuzz::accept_dtensor_errors([&] { decode_part(text, "fuzz", "fuzz"); });
  return 0;
}
