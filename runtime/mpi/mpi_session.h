// MpiSession: what the layers of one MPI backend share (the network backend, runtime/mpi/
// mpi_backend.cc, and the shared-memory layer over it, runtime/mpi/shared_memory_backend.h):
//   - the lock that serialises this process's MPI calls, and the communication thread that runs
//     queued buckets (runtime/mpi/async_buckets.h); exclusive() first lets that thread finish
//     what was queued before, so every process issues its MPI calls in program order;
//   - the communicators, one per list of processes (MPI_COMM_WORLD ranks, a member's position is
//     its rank), created on first use by those processes only, and the user-defined MPI ops;
//   - the agreement on each collective (runtime/collective_agreement.h): over the control channel
//     (runtime/mpi/control_channel.h), or through a SharedReducer the shared-memory layer routed
//     a group's agreement to (asleep while waiting, like its reduction).
//
// Requires MPI to be initialised for its life. Methods marked "caller holds the lock" need
// exclusive() or lock(); the others may be called from any thread.
#pragma once

#include <mpi.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/collective_agreement.h"
#include "runtime/collective_backend.h"
#include "runtime/mpi/comm_thread.h"
#include "runtime/mpi/mpi_types.h"
#include "runtime/mpi/shared_reducer.h"

namespace dtensor {

// The MPI_COMM_WORLD ranks of a group's processes, in group order (one member per process).
std::vector<int> ranks_of(const Group& group);
// This process's position in a group of one member per process.
int self_rank(const Group& group);

// Whether collectives agree before they run (set_collective_agreement, runtime/mpi/mpi_backend.h).
bool agreement_enabled();
void set_agreement_enabled(bool on);

class MpiSession {
 public:
  MpiSession();
  // Stops the communication thread, then frees the communicators (unless MPI is finalized).
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Whether buckets go to the communication thread: MPI allows calls from any thread one at a
  // time (MPI_THREAD_SERIALIZED or more). Without it all_reduce_start runs blocking all-reduces.
  bool threaded() const { return threaded_; }
  CommThread& comm_thread() { return comm_; }

  // The lock, once the communication thread has run everything queued before.
  std::unique_lock<std::mutex> exclusive();
  // The lock alone: for work running on the communication thread itself.
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mu_); }

  // Caller holds the lock.
  MPI_Comm comm_for(const std::vector<int>& processes);
  MPI_Op op_for(ReduceOp op, DType dtype) { return ops_.get(op, dtype); }

  // From now on the members of `processes` agree through `reducer` (made over exactly them, in
  // that order). Caller holds the lock.
  void route_agreement(const std::vector<int>& processes, SharedReducer* reducer);

  // Exchanges descriptors with the other members and throws CommunicationError on every member
  // when they disagree (or one has left the job). Returns the members' descriptors in group
  // order. Caller holds the lock, before any MPI call of the collective (even the first use's
  // communicator creation, which would wait for a member that is not coming).
  std::vector<CollectiveDescriptor> agree(const Group& group, const CollectiveDescriptor& mine,
                                          const char* function);

 private:
  std::mutex mu_;
  CommThread comm_;
  bool threaded_ = false;
  std::map<std::vector<int>, MPI_Comm> comms_;
  std::map<std::vector<int>, SharedReducer*> routes_;
  MpiOps ops_;
};

}  // namespace dtensor
