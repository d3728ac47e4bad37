#include "train/checkpoint/internal/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "train/checkpoint/internal/json_util.h"

namespace dtensor::checkpoint_internal {
namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {{DType::kF32, "F32"}, {DType::kF64, "F64"}, {DType::kBF16, "BF16"},
                                {DType::kI32, "I32"}, {DType::kI64, "I64"}, {DType::kBool, "BOOL"}};

}  // namespace

std::string safetensors_dtype(DType dtype) {
  for (const DTypeName& n : kNames) {
    if (n.dtype == dtype) return n.name;
  }
  return "?";
}

bool parse_safetensors_dtype(std::string_view name, DType* dtype) {
  for (const DTypeName& n : kNames) {
    if (name == n.name) {
      *dtype = n.dtype;
      return true;
    }
  }
  return false;
}

std::string encode_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const SafetensorsEntry& e : entries) {
    header[e.key] = {{"dtype", safetensors_dtype(e.dtype)},
                     {"shape", e.shape},
                     {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = header.dump();
  const uint64_t unpadded = 8 + json.size();
  json.append((kDataAlignment - unpadded % kDataAlignment) % kDataAlignment, ' ');
  uint64_t n = json.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

uint64_t decode_header_length(const char prefix[8]) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<uint8_t>(prefix[i])) << (8 * i);
  return n;
}

SafetensorsHeader decode_safetensors_header(std::string_view header_json, const std::string& path,
                                            const std::string& function) {
  auto bad = [&](const std::string& why) {
    throw_error<IoError>(function, "corrupt safetensors header in {}: {}", path, why);
  };
  nlohmann::json header;
  try {
    header = parse_untrusted_json(header_json);
  } catch (const std::exception& e) {
    bad(e.what());
  }
  if (!header.is_object()) bad("not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + header_json.size();
  try {
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        for (const auto& [k, v] : value.items()) out.metadata[k] = v.get<std::string>();
        continue;
      }
      SafetensorsEntry e;
      e.key = key;
      if (!parse_safetensors_dtype(value.at("dtype").get<std::string>(), &e.dtype)) {
        bad("tensor '" + key + "' has unsupported dtype " + value.at("dtype").dump());
      }
      e.shape = integer_array<int64_t>(value.at("shape"), "tensor '" + key + "' shape", 0);
      const int64_t bytes = checked_num_bytes(e.shape, dtype_size(e.dtype));
      if (bytes < 0) {
        bad("tensor '" + key + "' has shape " + shape_to_string(e.shape) +
            ", more than 2^63 bytes");
      }
      const std::vector<uint64_t> offsets =
          integer_array<uint64_t>(value.at("data_offsets"), "tensor '" + key + "' data_offsets");
      if (offsets.size() != 2) bad("tensor '" + key + "' has bad data_offsets");
      e.begin = offsets[0];
      e.end = offsets[1];
      const uint64_t expected = static_cast<uint64_t>(bytes);
      if (e.end < e.begin || e.end - e.begin != expected) {
        bad("tensor '" + key + "' spans " + std::to_string(e.end - e.begin) + " bytes for " +
            std::to_string(expected) + " bytes of data");
      }
      out.entries.push_back(std::move(e));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // nlohmann's type errors and the checked accessors'
    bad(e.what());
  }
  std::sort(out.entries.begin(), out.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const SafetensorsEntry& e : out.entries) {
    if (e.begin != at) bad("tensor '" + e.key + "' does not start where the previous one ends");
    at = e.end;
  }
  out.data_size = at;
  return out;
}

}  // namespace dtensor::checkpoint_internal
