// The safetensors container (https://github.com/huggingface/safetensors), written and read here
// without the library:
//
//   bytes [0, 8)          N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)      a JSON object: {"<tensor key>": {"dtype": "F32", "shape": [2, 3],
//                         "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
//   bytes [8 + N, ...)    the data section: each tensor's row-major little-endian bytes at
//                         [begin, end) relative to the start of the section
//
// Tensors are packed back to back in the data section, in the order given (the reference reader
// requires that there be no gaps); the header is padded with spaces so that the data section
// starts at a multiple of kDataAlignment. Metadata values are strings, as the format requires.
//
// Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace dtensor::checkpoint_internal {

inline constexpr uint64_t kDataAlignment = 64;

struct SafetensorsEntry {
  std::string key;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;
};

// "F32", "F64", "BF16", "I32", "I64", "BOOL".
std::string safetensors_dtype(DType dtype);
// The inverse; false for a name dtensor has no dtype for.
bool parse_safetensors_dtype(std::string_view name, DType* dtype);

// The first 8 + N bytes of a file: length prefix and padded JSON. `entries` must be packed (each
// begin is the previous end, the first 0) and have end - begin == elements * dtype size.
std::string encode_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata);

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // ordered by begin
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where the data section starts in the file
  uint64_t data_size = 0;   // end of the last tensor
};

// The header length N from the first 8 bytes.
uint64_t decode_header_length(const char prefix[8]);
// Parses and validates the JSON header (dtypes, shapes, packed offsets). `header_json` is bytes
// [8, 8 + N). Throws IoError naming `function` and `path` for anything malformed.
SafetensorsHeader decode_safetensors_header(std::string_view header_json, const std::string& path,
                                            const std::string& function);

}  // namespace dtensor::checkpoint_internal
