// The MPI collective backend: collectives over groups whose devices live in several processes.
//
// A group spanning processes runs in three stages: the members this process owns are combined
// through `local` (the in-process backend: threads and shared memory), one MPI collective runs
// across the processes of the group, and its result is shared by the local members. A group whose
// members all live in this process goes to `local` alone. The processes of a group map to an MPI
// communicator created on first use (collectively, by those processes only) and cached.
//
// Every process of a group must make the same calls in the same order, which SPMD programs do;
// collectives over distinct groups are issued one at a time (MPI calls are serialised by a lock).
// MPI errors come back as CommunicationError carrying MPI's error string.
//
// Requires MPI to be initialised for the life of the backend (dtensor/runtime.h does both).
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

std::shared_ptr<CollectiveBackend> make_mpi_backend(std::shared_ptr<CollectiveBackend> local);

}  // namespace dtensor
