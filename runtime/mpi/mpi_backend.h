// The MPI collective backend: flat collectives across processes, one group member per process
// (one tensor per call), like a NCCL backend with one rank per GPU.
//
// A group's processes map to an MPI communicator whose ranks follow group order (a member's
// position is its rank), created on first use (collectively, by those processes only) and
// cached. Groups with several members in one process go through make_hierarchical_backend
// (runtime/hierarchical_backend.h), which dtensor/runtime.cc registers for CPU meshes spanning
// processes; given such a group directly, every call throws CommunicationError.
//
// Every process of a group must make the same calls in the same order, which SPMD programs do;
// collectives over distinct groups are issued one at a time (MPI calls are serialised by a lock).
// Max and min of floats propagate NaN (MPI's built-in ones need not); bf16 reduces through its
// own MPI ops. MPI errors come back as CommunicationError carrying MPI's error string.
//
// Requires MPI to be initialised for the life of the backend (dtensor/runtime.h does both).
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

std::shared_ptr<CollectiveBackend> make_mpi_backend();

}  // namespace dtensor
