// How a function ends when run in a forked child: the probe behind the emulated GPU's tests that
// a host read of opaque memory crashes. The child runs `fn` and exits 0; the parent waits at most
// `timeout_seconds`, then kills it. Tests only (fork in a threaded process: the child must only
// touch memory and exit).
#pragma once

#include <functional>
#include <string>

namespace dtensor::emulated {

struct ProbeResult {
  bool segfault = false;  // the child died of SIGSEGV
  std::string what;       // "exited 0", "killed by signal 11", "timed out", ...
};

ProbeResult run_in_child(const std::function<void()>& fn, int timeout_seconds = 30);

}  // namespace dtensor::emulated
