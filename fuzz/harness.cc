#include "fuzz/harness.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace dtensor::fuzz {

std::string scratch_directory() {
  static const std::string dir = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string d = std::string(base != nullptr ? base : "/tmp") + "/dtensor-fuzz-" +
                    std::to_string(::getpid());
    ::mkdir(d.c_str(), 0755);
    return d;
  }();
  return dir;
}

}  // namespace dtensor::fuzz
