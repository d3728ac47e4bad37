// The progress display: plain lines without control characters off a terminal and under mpirun,
// redraws only where allowed.
#include "train/progress.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace dtensor::cli;

namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<char>(c));
  return out;
}

}  // namespace

TEST_CASE("an mpirun rank never redraws, even on a pty, unless forced") {
  unsetenv("DTENSOR_PROGRESS");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  CHECK_FALSE(redraw_in_place(stdout));
  setenv("DTENSOR_PROGRESS", "bar", 1);
  CHECK(redraw_in_place(stdout));
  setenv("DTENSOR_PROGRESS", "lines", 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  CHECK_FALSE(redraw_in_place(stdout));
  unsetenv("DTENSOR_PROGRESS");
}

TEST_CASE("off a terminal the display writes one plain line per epoch") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  Progress progress(2, /*enabled=*/true, f);
  CHECK_FALSE(progress.redraws());
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    progress.begin_epoch(epoch, 3);
    for (int64_t s = 1; s <= 3; ++s) progress.step(s, {{"loss", 0.5}, {"accuracy", 0.75}});
    progress.end_epoch({{"loss", 0.5}, {"test_loss", 0.25}});
  }
  const std::string out = contents(f);
  std::fclose(f);
  for (char c : out) CHECK((c == '\n' || (c >= ' ' && c < 127)));
  CHECK(out.rfind("Epoch 1/2 - 3/3 - ", 0) == 0);
  CHECK(out.find("loss: 0.5000 - test_loss: 0.2500\nEpoch 2/2 - 3/3 - ") != std::string::npos);
}

TEST_CASE("a forced bar redraws in place with an ETA and the running metrics") {
  setenv("DTENSOR_PROGRESS", "bar", 1);
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  Progress progress(1, true, f);
  CHECK(progress.redraws());
  progress.begin_epoch(0, 4);
  progress.step(1, {{"loss", 1.25}});
  progress.end_epoch({{"loss", 1.0}});
  const std::string out = contents(f);
  std::fclose(f);
  unsetenv("DTENSOR_PROGRESS");
  CHECK(out.find("Epoch 1/1\n\r1/4 [") == 0);
  CHECK(out.find("ETA: ") != std::string::npos);
  CHECK(out.find("loss: 1.2500\x1b[K") != std::string::npos);
  CHECK(out.find("\r\x1b[KEpoch 1/1 - 1/4 - ") != std::string::npos);
}

TEST_CASE("a disabled display prints nothing") {
  setenv("DTENSOR_PROGRESS", "bar", 1);
  std::FILE* f = std::tmpfile();
  Progress progress(1, /*enabled=*/false, f);
  progress.begin_epoch(0, 2);
  progress.step(2, {{"loss", 1}});
  progress.end_epoch({{"loss", 1}});
  CHECK(contents(f).empty());
  std::fclose(f);
  unsetenv("DTENSOR_PROGRESS");
}
