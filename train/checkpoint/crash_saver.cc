// The crash test's victim: saves checkpoints of CrashModel through a CheckpointManager, one per
// step, until it is killed. Resumes after the latest complete checkpoint of `directory`.
//
//   crash_saver <directory>
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
  for (;; ++step) {
    model.set(step);
    manager.save(step);
  }
}
