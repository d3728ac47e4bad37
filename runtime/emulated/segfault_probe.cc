#include "runtime/emulated/segfault_probe.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace dtensor::emulated {

ProbeResult run_in_child(const std::function<void()>& fn, int timeout_seconds) {
  const pid_t pid = ::fork();
  if (pid < 0) return {false, "fork failed"};
  if (pid == 0) {
    // The expected crash: default action, no core file.
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(SIGSEGV, SIG_DFL);
    try {
      fn();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return {false, "timed out"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFSIGNALED(status)) {
    return {WTERMSIG(status) == SIGSEGV, "killed by signal " + std::to_string(WTERMSIG(status))};
  }
  return {false, "exited " + std::to_string(WEXITSTATUS(status))};
}

}  // namespace dtensor::emulated
