// A flat inter-process backend for processes emulated by threads of one process: the in-memory
// stand-in for MPI (as LevelDB's memenv stands in for the file system), for tests.
//
// Each emulated process is a thread with its own meshes (Mesh::create with process_index and
// num_processes); registered as the CPU inter-process backend,
//   register_collective_backends(DeviceType::kCPU, make_in_process_backend(),
//                                make_threaded_processes_backend());
// their collectives go through make_hierarchical_backend like MPI's do. Like MPI, it takes groups
// with one member per process (CommunicationError otherwise). Every call is a rendezvous of the
// group's processes, keyed by the processes in group order; the result is computed by each
// process from every member's tensor with the in-process backend and cloned, so emulated
// processes share no storage. A process that waits longer than `timeout_s` for the others (a
// test whose processes diverged) gets CommunicationError instead of hanging.
//
// Thread-safe: meant to be called from one thread per emulated process.
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

std::shared_ptr<CollectiveBackend> make_threaded_processes_backend(double timeout_s = 60);

}  // namespace dtensor
