#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dtensor::bench {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{:.6g}", v);
}

}  // namespace

void report(const std::string& name, const std::vector<Field>& params, double value,
            const std::string& unit) {
  std::string line = "{\"bench\":" + json_string(name);
  for (const auto& [key, field] : params) {
    line += "," + json_string(key) + ":";
    if (auto* i = std::get_if<int64_t>(&field)) line += std::to_string(*i);
    if (auto* d = std::get_if<double>(&field)) line += json_number(*d);
    if (auto* s = std::get_if<std::string>(&field)) line += json_string(*s);
  }
  line += ",\"value\":" + json_number(value) + ",\"unit\":" + json_string(unit) + "}\n";
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

double median_seconds(const std::function<void()>& body, int repetitions, int warmup) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> times;
  times.reserve(static_cast<size_t>(repetitions));
  for (int i = 0; i < repetitions; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace dtensor::bench
