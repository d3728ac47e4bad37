// Reading untrusted JSON (index.json, per-process parts, safetensors headers): a nesting limit
// checked before parsing, and integers read through one checked accessor. nlohmann's get<T>()
// converts out-of-range numbers (1e300 into int64_t, -1 into uint32_t) with undefined behaviour;
// these refuse them instead.
//
// Every failure throws std::invalid_argument (or nlohmann::json::exception from the parser) with
// the offending key; callers turn it into an IoError naming the file. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/shape.h"

namespace dtensor::checkpoint_internal {

// Deeper than any file the checkpoint writes (index.json nests 6 levels), shallow enough that
// the recursive parts of nlohmann (dump, destruction) cannot exhaust the stack.
inline constexpr int kMaxJsonDepth = 32;

// Throws std::invalid_argument if arrays and objects in `text` nest deeper than `max_depth`. A
// linear scan that needs no stack; strings (escapes included) are skipped.
void check_json_depth(std::string_view text, int max_depth = kMaxJsonDepth);

// check_json_depth, then nlohmann::json::parse.
nlohmann::json parse_untrusted_json(std::string_view text);

// The integer `value` as T if it is a JSON integer in [lo, hi]; otherwise throws
// std::invalid_argument("<what> must be an integer in [lo, hi], not <value>").
int64_t checked_integer(const nlohmann::json& value, const std::string& what, int64_t lo,
                        int64_t hi);
uint64_t checked_unsigned(const nlohmann::json& value, const std::string& what,
                          uint64_t hi = std::numeric_limits<uint64_t>::max());

template <typename T>
T integer_value(const nlohmann::json& value, const std::string& what,
                T lo = std::numeric_limits<T>::min()) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    (void)lo;  // always 0
    return checked_unsigned(value, what);
  } else {
    return static_cast<T>(checked_integer(value, what, static_cast<int64_t>(lo),
                                          static_cast<int64_t>(std::numeric_limits<T>::max())));
  }
}

// integer_value of obj.at(key), named by `key`.
template <typename T>
T integer_at(const nlohmann::json& obj, const char* key, T lo = std::numeric_limits<T>::min()) {
  return integer_value<T>(obj.at(key), key, lo);
}

// Every element of the JSON array `value` through integer_value; `what` names the array.
template <typename T>
std::vector<T> integer_array(const nlohmann::json& value, const std::string& what,
                             T lo = std::numeric_limits<T>::min()) {
  if (!value.is_array()) throw std::invalid_argument(what + " must be an array");
  std::vector<T> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(integer_value<T>(value[i], what + "[" + std::to_string(i) + "]", lo));
  }
  return out;
}

// The number of elements of `shape` (dims >= 0), or -1 if it exceeds int64_t.
int64_t checked_num_elements(const Shape& shape);
// Elements times `element_size`, or -1 if that exceeds int64_t.
int64_t checked_num_bytes(const Shape& shape, uint64_t element_size);

}  // namespace dtensor::checkpoint_internal
