// Test support for the MPI backend's tests: the group of every process of the job, one member
// each (member k on process k).
#pragma once

#include <cstdint>

#include "runtime/collective_backend.h"
#include "runtime/process.h"

namespace dtensor::testing {

inline Group everyone() {
  const ProcessInfo p = this_process();
  Group g;
  for (int64_t q = 0; q < p.count; ++q) {
    g.devices.push_back(q);
    g.owners.push_back(q);
  }
  g.self = p.index;
  return g;
}

}  // namespace dtensor::testing
