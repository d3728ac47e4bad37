#include "bench/peak_memory.h"

#include <fstream>

#include "runtime/buffer_pool.h"

namespace dtensor::bench {

double proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

double step_peak_bytes(const std::function<void()>& step) {
  BufferPool::global().trim();
  std::ofstream("/proc/self/clear_refs") << "5";
  const double resting = proc_status_bytes("VmRSS");
  step();
  return proc_status_bytes("VmHWM") - resting;
}

}  // namespace dtensor::bench
