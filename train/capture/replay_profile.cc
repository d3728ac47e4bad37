#include "train/capture/replay_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

namespace dtensor::capture {

bool ReplayProfile::enabled_by_environment() {
  static const bool enabled = [] {
    const char* v = std::getenv("DTENSOR_CAPTURE_PROFILE");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return enabled;
}

void ReplayProfile::start(const std::vector<std::string>& labels) {
  labels_ = labels;
  call_seconds_.assign(labels.size(), 0.0);
  on_ = true;
}

ReplayProfile::~ReplayProfile() {
  if (!on_ || replays_ == 0) return;
  // Totals by kind: calls with the same label add up.
  std::map<std::string, std::pair<double, int64_t>> kinds;
  double total = 0;
  for (size_t c = 0; c < labels_.size(); ++c) {
    auto& [seconds, calls] = kinds[labels_[c]];
    seconds += call_seconds_[c];
    ++calls;
    total += call_seconds_[c];
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> sorted(kinds.begin(),
                                                                         kinds.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  const double per = 1e6 / static_cast<double>(replays_);
  std::fprintf(stderr, "capture profile: %lld replays of %zu calls, %.1f us per replay\n",
               static_cast<long long>(replays_), labels_.size(), total * per);
  for (const auto& [label, v] : sorted) {
    std::fprintf(stderr, "  %10.1f us %5.1f%% %6lld calls  %s\n", v.first * per,
                 total > 0 ? 100.0 * v.first / total : 0.0, static_cast<long long>(v.second),
                 label.c_str());
  }
}

}  // namespace dtensor::capture
