// The peak memory of one call, as the kernel counts it: the process's high-water mark of resident
// bytes (VmHWM) over the resident bytes before the call. Linux only (0 where /proc is missing).
// Not thread-safe: it resets the process's peak.
#pragma once

#include <functional>
#include <string>

namespace dtensor::bench {

// "VmRSS" or "VmHWM" of this process, in bytes (0 where /proc is missing).
double proc_status_bytes(const std::string& field);

// Peak resident bytes of one call of `step` over the resting set, with the buffer pool emptied
// first so that the step's buffers count (the kernel resets the peak on "5" to clear_refs).
double step_peak_bytes(const std::function<void()>& step);

}  // namespace dtensor::bench
