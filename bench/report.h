// The output convention of every benchmark binary under bench/.
//
// A benchmark prints one JSON object per measurement on stdout and nothing else:
//   {"bench":"matmul","n":1024,"devices":8,"value":101.3,"unit":"GFLOP/s"}
// Progress and diagnostics go to stderr. Timings are medians over repetitions, so a noisy
// machine moves them less; two things being compared are measured in the same run.
//
// Not thread-safe: report from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dtensor::bench {

using Field = std::pair<std::string, std::variant<int64_t, double, std::string>>;

// Prints {"bench":name, <params...>, "value":value, "unit":unit} on one line of stdout.
void report(const std::string& name, const std::vector<Field>& params, double value,
            const std::string& unit);

// Median wall time in seconds of `body` over `repetitions` runs, after `warmup` untimed runs.
double median_seconds(const std::function<void()>& body, int repetitions = 15, int warmup = 2);

// Keeps the compiler from optimising away a value that a benchmark computes.
template <typename T>
void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace dtensor::bench
