// check_path: output folders that several processes of one job create at the same time.
#include "cli/flags.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace dtensor::cli {
namespace {

fs::path fresh_root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  fs::path root = fs::path(tmp != nullptr ? tmp : "/tmp") / "flags_test";
  fs::remove_all(root);
  fs::create_directories(root);
  return root;
}

// Regression: a process that found no folder, then saw the one another process had just made,
// reported "exists and is not a folder" (examples/keras:resume_mpi_test failed once this way).
TEST_CASE("check_path: processes creating the same output folder at once all succeed") {
  fs::path root = fresh_root();
  constexpr int kFolders = 300;
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::string first_failure;
  std::atomic<bool> recorded{false};
  for (int f = 0; f < kFolders; ++f) {
    std::string dir = (root / ("run" + std::to_string(f)) / "checkpoints").string();
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        std::string e = check_path("--checkpoint_dir", dir, PathKind::kOutputDir);
        if (!e.empty()) {
          failures.fetch_add(1);
          if (!recorded.exchange(true)) first_failure = e;
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  INFO(first_failure);
  CHECK(failures.load() == 0);
}

TEST_CASE("check_path: an output folder that is a file is refused") {
  fs::path root = fresh_root();
  fs::path file = root / "taken";
  { std::FILE* f = std::fopen(file.c_str(), "w"); std::fclose(f); }
  CHECK(check_path("--out", file.string(), PathKind::kOutputDir) ==
        "--out: '" + file.string() + "' exists and is not a folder");
}

}  // namespace
}  // namespace dtensor::cli
