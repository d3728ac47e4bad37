#include "train/checkpoint/internal/json_util.h"

#include <fmt/format.h>

#include <stdexcept>

namespace dtensor::checkpoint_internal {
namespace {

// A short rendering of a value for an error message (it may be a huge array).
std::string brief(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace

void check_json_depth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw std::invalid_argument(
            fmt::format("JSON nests deeper than {} levels (at byte {})", max_depth, i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

nlohmann::json parse_untrusted_json(std::string_view text) {
  check_json_depth(text);
  return nlohmann::json::parse(text);
}

int64_t checked_integer(const nlohmann::json& value, const std::string& what, int64_t lo,
                        int64_t hi) {
  bool ok = false;
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    v = ok ? static_cast<int64_t>(u) : 0;
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
    ok = true;
  }
  if (!ok || v < lo || v > hi) {
    throw std::invalid_argument(
        fmt::format("{} must be an integer in [{}, {}], not {}", what, lo, hi, brief(value)));
  }
  return v;
}

uint64_t checked_unsigned(const nlohmann::json& value, const std::string& what, uint64_t hi) {
  bool ok = false;
  uint64_t v = 0;
  if (value.is_number_unsigned()) {
    v = value.get<uint64_t>();
    ok = true;
  } else if (value.is_number_integer()) {
    ok = value.get<int64_t>() >= 0;  // JSON non-negative integers parse as unsigned; be safe
    v = ok ? static_cast<uint64_t>(value.get<int64_t>()) : 0;
  }
  if (!ok || v > hi) {
    throw std::invalid_argument(
        fmt::format("{} must be an integer in [0, {}], not {}", what, hi, brief(value)));
  }
  return v;
}

int64_t checked_num_elements(const Shape& shape) { return checked_num_bytes(shape, 1); }

int64_t checked_num_bytes(const Shape& shape, uint64_t element_size) {
  int64_t n = static_cast<int64_t>(element_size);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

}  // namespace dtensor::checkpoint_internal
