// The crash test's victim: saves checkpoints of CrashModel through a CheckpointManager, one per
// step, until it is killed. Resumes after the latest complete checkpoint of `directory`. Writes
// one byte to stdout once it is about to save (the test times its kill from that byte, so a slow
// start on a loaded machine does not eat the delay).
//
//   crash_saver <directory>
#include <unistd.h>

#include <cstdio>

#include "train/checkpoint/crash_model.h"

int main(int argc, char** argv) {
  using namespace dtensor;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <directory>\n", argv[0]);
    return 2;
  }
  checkpoint_testing::CrashModel model;
  CheckpointManager manager(model.checkpoint, argv[1], 3);
  std::optional<std::string> latest = manager.latest();
  int64_t step = latest ? *checkpoint_step(*latest) + 1 : 1;
  const char ready = 'r';
  if (::write(STDOUT_FILENO, &ready, 1) != 1) return 3;
  for (;; ++step) {
    model.set(step);
    manager.save(step);
  }
}
