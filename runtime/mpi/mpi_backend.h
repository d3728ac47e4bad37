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
// Before any data moves, the members agree on each call: they exchange a small descriptor (kind,
// op, dtype, shapes, tensor count; runtime/collective_agreement.h) over the control channel
// (runtime/mpi/control_channel.h), or through their SharedReducer once processes of one host
// have one (asleep while waiting, like the reduction), and all throw CommunicationError naming the
// collective, this process's call and a disagreeing one's when they differ, staying in step. The
// exchange also carries what all-gather, all-to-all and broadcast need to know of the others'
// shapes, and finds a member that has left the job (its program ended) instead of waiting for it
// forever.
//
// Layers, one concern per file: the network backend here (every collective over MPI's own calls);
// the shared-memory layer over it (runtime/mpi/shared_memory_backend.h), which takes all-reduces
// among processes of one host (DTENSOR_MPI_SHARED=0 leaves it out); what both share, the lock,
// communication thread, communicators and agreement (runtime/mpi/mpi_session.h); the
// asynchronous bucket path (runtime/mpi/async_buckets.h): all_reduce_start hands a bucket to the
// communication thread, which reduces it while the caller computes, with all_reduce's bits.
// Every other call first waits for the queued buckets, so each process issues its MPI calls in
// program order. This needs MPI_THREAD_SERIALIZED or more; with less, all_reduce_start runs the
// blocking all-reduces at once.
// DTENSOR_OVERLAP_TRACE=1 prints when each bucket was queued, reduced and waited for.
// Max and min of floats propagate NaN (MPI's built-in ones need not); bf16 reduces through its
// own MPI ops (runtime/mpi/mpi_types.h). MPI errors come back as CommunicationError carrying MPI's
// error string.
//
// Requires MPI to be initialised for the life of the backend (dtensor/runtime.h does both).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

std::shared_ptr<CollectiveBackend> make_mpi_backend();

// For benchmarks: whether all-reduces, reduce-scatters, buckets and barriers agree before they
// run (the default). Off, a disagreement goes unnoticed or hangs; all-gather, all-to-all and
// broadcast exchange descriptors anyway, since they carry the members' shapes. Process-wide.
void set_collective_agreement(bool on);

// How many all-reduces (blocking ones and buckets) this process's MPI backends have run through
// shared memory so far: for tests and tools.
int64_t shared_memory_reductions();

}  // namespace dtensor
