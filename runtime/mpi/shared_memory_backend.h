// The shared-memory layer of the MPI backend: a decorator (runtime/collective_backend_wrapper.h)
// over the network backend that takes the all-reduces (blocking ones, buckets, and
// reduce-scatters whose chunks are not contiguous, which reduce everything first) of groups whose
// processes share hosts, and forwards every other call.
//
// On first use a group's hosts are found (runtime/mpi/host_topology.h: MPI_COMM_TYPE_SHARED, or
// DTENSOR_MPI_PROCESSES_PER_HOST for tests), and:
//   - every process on one host: a SharedReducer (runtime/mpi/shared_reducer.h) over an MPI
//     shared-memory window: no MPI call, waits asleep, every element folded in process order
//     (with two processes, MPI_Allreduce's bits). From then on the group's agreement on each
//     collective goes through the reducer too (MpiSession::route_agreement);
//   - processes on several hosts, each host's consecutive in group order, more than two of them:
//     the host-aware reduction (runtime/mpi/host_reduction.h): shared memory within each host,
//     one leader per host over the network, in the same order as on one host, so the bits do not
//     depend on how the processes are spread over hosts;
//   - otherwise (two processes on two hosts, hosts interleaved in group order, no window to be
//     had): the network backend.
//
// Shares `session` (lock, communication thread, communicators) with the network backend it wraps,
// so that both issue their MPI calls in one program order. Windows are kept until MPI_Finalize
// frees them (freeing one earlier would be a collective call in a destructor). Thread-safe as
// the MPI backend is (calls serialised by the session's lock).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/collective_backend.h"
#include "runtime/mpi/mpi_session.h"

namespace dtensor {

std::shared_ptr<CollectiveBackend> make_shared_memory_backend(
    std::shared_ptr<CollectiveBackend> network, std::shared_ptr<MpiSession> session);

// How many all-reduces this process's shared-memory layers have run so far
// (shared_memory_reductions, runtime/mpi/mpi_backend.h).
int64_t shared_memory_reduction_count();

}  // namespace dtensor
