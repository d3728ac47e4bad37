// This process's place in a job: its index and the number of processes.
//
// One process unless the runtime started under mpirun (dtensor/runtime.h sets it once at start-up).
// Meshes created with create_mesh take their process ownership from here. Thread-safe.
#pragma once

#include <cstdint>

namespace dtensor {

struct ProcessInfo {
  int64_t index = 0;
  int64_t count = 1;
};

ProcessInfo this_process();
// Called by the runtime at start-up; InvalidArgumentError unless 0 <= index < count.
void set_this_process(ProcessInfo info);

}  // namespace dtensor
