// What a fuzz harness promises and how it reports a finding.
//
// A harness feeds arbitrary bytes to a reader. A dtensor::Error is the contract's answer to bad
// input, so it is fine; everything else is a finding: another exception type escaping (through
// libFuzzer it terminates the process, so it is reported with the input), a crash, a sanitizer
// report, or a violated property, reported by throwing FuzzFinding.
//
// The same harness function runs under libFuzzer (--config=fuzz, clang) and under the replay
// test (replay_main.cc, any compiler), which feeds it every committed corpus and crash file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/error.h"

namespace dtensor::fuzz {

// A property the harness checks did not hold. Deliberately not a dtensor::Error.
class FuzzFinding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] inline void finding(const std::string& what) { throw FuzzFinding(what); }

// Runs `body`, treating a dtensor::Error as the expected refusal of bad input.
template <typename Body>
void accept_dtensor_errors(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

// A directory of its own for this process (created once), for harnesses that need files.
std::string scratch_directory();

}  // namespace dtensor::fuzz

// The libFuzzer entry point every harness defines.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
