// Crash safety: a process saving checkpoints in a loop is killed (SIGKILL) at random moments,
// again and again; after every kill the latest checkpoint, and every other ckpt-<step> directory,
// must be complete and restore bit-identically to the values of its step.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>

#include "train/checkpoint/crash_model.h"
#include "train/checkpoint/test_util.h"

extern char** environ;

using namespace dtensor;
using namespace dtensor::checkpoint_testing;

namespace {

// The saver binary: in the runfiles under Bazel, else next to this test binary.
std::string saver_path() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return std::string(srcdir) + "/" + workspace + "/train/checkpoint/crash_saver";
  }
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path(self, n > 0 ? static_cast<size_t>(n) : 0);
  return path.substr(0, path.rfind('/') + 1) + "crash_saver";
}

// Starts the saver (posix_spawn: no fork of this multi-threaded process) with its stdout on a
// pipe, waits (at most 30 s) for its ready byte, kills it with SIGKILL `delay` after that, and
// reaps it. Returns its wait status.
int run_and_kill(const std::string& saver, const std::string& dir,
                 std::chrono::microseconds delay) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  posix_spawn_file_actions_t actions;
  REQUIRE(::posix_spawn_file_actions_init(&actions) == 0);
  REQUIRE(::posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO) == 0);
  REQUIRE(::posix_spawn_file_actions_addclose(&actions, fds[0]) == 0);
  pid_t pid;
  std::string arg0 = saver, arg1 = dir;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  const int spawned = ::posix_spawn(&pid, saver.c_str(), &actions, nullptr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) ::close(fds[0]);
  REQUIRE(spawned == 0);
  pollfd ready{fds[0], POLLIN, 0};
  const int polled = ::poll(&ready, 1, 30000);
  ::close(fds[0]);
  if (polled == 1) std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("the saver did not report ready within 30 s");
  REQUIRE(polled == 1);
  return status;
}

}  // namespace

TEST_CASE("a saver killed at random moments never leaves a checkpoint that restores wrongly") {
  const std::string saver = saver_path();
  REQUIRE(::access(saver.c_str(), X_OK) == 0);
  const std::string dir = fresh_directory();
  std::mt19937 rng(20240611);
  int64_t last_step = 0, kills_mid_run = 0;
  std::set<std::string> unfinished;  // staging directories kills left behind
  // At least 40 kills; more (within a time budget) until enough of them landed inside saves and
  // the saver got somewhere, which takes longer on a slow or busy machine.
  const auto start = std::chrono::steady_clock::now();
  auto enough = [&](int i) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i < 40) return false;
    return (unfinished.size() >= 5 && last_step >= 5) || i >= 150 || elapsed > 20;
  };
  for (int i = 0; !enough(i); ++i) {
    // Delays from 0 to 150 ms after the saver is ready: before or inside its first save, and
    // anywhere inside later ones.
    const auto delay = std::chrono::microseconds(rng() % 150000);
    const int status = run_and_kill(saver, dir, delay);
    INFO("iteration " << i << ", killed after " << delay.count() << " us");
    // A saver that died on its own (an exception, a crash) is a failure of its own.
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);

    for (const std::string& name : list_names(dir)) {
      if (name.find(".tmp-") != std::string::npos) unfinished.insert(name);
    }

    CrashModel reader;
    CheckpointManager manager(reader.checkpoint, dir, 3);
    std::optional<int64_t> step = manager.restore_latest();
    if (!step) continue;
    CHECK(*step >= last_step);
    CHECK(reader.holds(*step));
    kills_mid_run += *step > last_step;
    last_step = *step;
    // Every directory named like a checkpoint is complete and holds its step's values.
    for (const std::string& name : list_names(dir)) {
      std::optional<int64_t> s = checkpoint_step(dir + "/" + name);
      if (!s) continue;
      INFO(name);
      REQUIRE(is_complete_checkpoint(dir + "/" + name));
      CrashModel other;
      other.checkpoint.restore(dir + "/" + name);
      CHECK(other.holds(*s));
    }
  }
  INFO("latest step " << last_step << ", " << unfinished.size() << " saves left unfinished");
  CHECK(last_step >= 3);  // the saver made progress between kills
  CHECK(kills_mid_run >= 2);
  CHECK(unfinished.size() >= 3);  // and kills did land inside saves
}
