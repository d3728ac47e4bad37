// Fuzzes the safetensors header reader on the JSON part of a header (bytes [8, 8 + N)).
// Property: a header that parses re-encodes to one that parses to the same tensors.
#include <string>
#include <string_view>

#include "fuzz/harness.h"
#include "train/checkpoint/internal/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtensor;
  using namespace dtensor::checkpoint_internal;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::accept_dtensor_errors([&] {
    const SafetensorsHeader header = decode_safetensors_header(text, "fuzz", "fuzz");
    const std::string encoded = encode_safetensors_header(header.entries, header.metadata);
    if (decode_header_length(encoded.data()) + 8 != encoded.size()) {
      fuzz::finding("the encoded header's length prefix is wrong");
    }
    SafetensorsHeader back;
    try {
      back = decode_safetensors_header(std::string_view(encoded).substr(8), "fuzz", "fuzz");
    } catch (const Error& e) {
      fuzz::finding(std::string("a re-encoded header does not parse: ") + e.what());
    }
    bool same = back.entries.size() == header.entries.size() && back.metadata == header.metadata &&
                back.data_size == header.data_size;
    for (size_t i = 0; same && i < back.entries.size(); ++i) {
      const SafetensorsEntry &a = header.entries[i], &b = back.entries[i];
      same = a.key == b.key && a.dtype == b.dtype && a.shape == b.shape && a.begin == b.begin &&
             a.end == b.end;
    }
    if (!same) fuzz::finding("a re-encoded header parses to different tensors");
  });
  return 0;
}
