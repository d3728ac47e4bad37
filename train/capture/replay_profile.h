// ReplayProfile: an opt-in breakdown of where a program's replays spend their time, by kind of
// call (the op the recorder saw and the value it produced, e.g. "run_local f32[8,700] [batch,
// unsharded]"). Set DTENSOR_CAPTURE_PROFILE=1 to turn it on; the totals go to stderr when the
// program is destroyed (for a bench, at exit), sorted by time.
//
// Off (the default) it costs one predictable branch per call and takes no time stamps.
//
// Ownership: owned by its Program. Thread-safety: none; used under the program's replay, which
// is serialised by its Function.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dtensor::capture {

class ReplayProfile {
 public:
  using Clock = std::chrono::steady_clock;

  // Reads DTENSOR_CAPTURE_PROFILE once per process.
  static bool enabled_by_environment();

  ReplayProfile() = default;
  ReplayProfile(const ReplayProfile&) = delete;
  ReplayProfile& operator=(const ReplayProfile&) = delete;
  ~ReplayProfile();

  // Turns the profile on with one label per call (the program's calls, in order); a call's kind
  // is its label, so calls with equal labels add up.
  void start(const std::vector<std::string>& labels);
  bool on() const { return on_; }

  // Call `c` of the program took `seconds`.
  void add(size_t c, double seconds) { call_seconds_[c] += seconds; }
  void end_replay() { ++replays_; }

 private:
  bool on_ = false;
  int64_t replays_ = 0;
  std::vector<std::string> labels_;
  std::vector<double> call_seconds_;
};

}  // namespace dtensor::capture
