// The control channel: small point-to-point messages between the processes of an MPI job, apart
// from the data of collectives, through which they agree on each collective before it moves data
// and learn that a process has left the job.
//
// Agreement: before every collective, each member sends its CollectiveDescriptor
// (runtime/collective_agreement.h) to every other member and receives theirs (exchange). Messages
// between two processes arrive in the order they were sent, so the k-th collective two processes
// share meets the k-th on both sides. Point-to-point messages on MPI_COMM_WORLD need no
// communicator made for the group first (a collective call that would itself wait forever for a
// process that is not coming).
//
// Departures: a process whose program ends normally announces it to every other process (depart)
// and then waits for theirs before MPI_Finalize. A process waiting for a member in exchange polls
// for announcements and throws CommunicationError when that member has left, so the job ends
// through the usual fault path (dtensor/runtime.h) instead of hanging. Once a member has left,
// every later exchange with it throws at once. Such an error is meant to end the job: the
// survivors' descriptors of the failed call may still be in flight, so later calls among them
// can report a disagreement.
//
// While waiting, exchange tests in a loop, yielding the core between tests after the first few
// hundred, as Open MPI's own blocking calls do on an oversubscribed host. (Naps of 50 us once a
// wait passed 2 ms made the relayout mpirun test about twice as slow on a loaded 2-core host:
// a process that naps is not running when the late one arrives.)
//
// Requires MPI to be initialised, with MPI_COMM_WORLD's errors returned (dtensor/runtime.cc).
// Thread-safety: every function may be called from any thread; calls are serialised (callers
// that make MPI calls of their own hold their own lock around both, or MPI_THREAD_MULTIPLE).
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/collective_agreement.h"

namespace dtensor {

// Sends `mine` to every other process of `processes` (MPI_COMM_WORLD ranks in group order, this
// process at position `self`) and receives theirs; returns all of them in group order. Throws
// CommunicationError, naming `function`, when a member has departed.
std::vector<CollectiveDescriptor> exchange_descriptors(const std::vector<int>& processes,
                                                       size_t self,
                                                       const CollectiveDescriptor& mine,
                                                       const char* function);

// Whether `process` (a MPI_COMM_WORLD rank) has announced that it left the job: for a backend
// waiting for it by other means (runtime/mpi/shared_reducer.h).
bool has_departed(int process, const char* function);

// Throws CommunicationError "[function] process <who> has finished its program (its runtime shut
// down) while process <self> (this one) waits for it in <mine>; ...".
[[noreturn]] void throw_departed(const char* function, int who, int self,
                                 const CollectiveDescriptor& mine);

// Announces that this process leaves the job and waits until every other process has announced
// it too. Called once, at shutdown, before MPI_Finalize.
void depart_from_job();

}  // namespace dtensor
