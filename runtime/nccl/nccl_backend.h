// The NCCL collective backend: collectives over GPU memory through NCCL communicators.
//
// Groups: a group's members are GPU devices. Either every member lives in a different process
// (one tensor per call: the inter-process backend of GPU meshes spanning processes, under
// mpirun, one process per GPU), or every member lives in this process on a distinct physical GPU
// (one tensor per member: one process driving several GPUs, the seed's towers); the calls for the
// local members of a group are issued between ncclGroupStart and ncclGroupEnd. Logical devices
// sharing a physical GPU cannot be NCCL ranks (NCCL refuses duplicate GPUs): the in-process GPU
// backend (runtime/cuda/gpu_collectives.h) serves them, and make_gpu_backends composes the two.
//
// Communicators: one set per group (keyed by its device ids), created on first use and cached.
// Across processes, the group's first process creates the ncclUniqueId and sends it to the other
// members' processes over MPI (MPI_COMM_WORLD ranks are process indices); every process of the
// group must reach the same collective in the same order (SPMD). Communicators are non-blocking
// (ncclConfig_t::blocking = 0).
//
// Agreement: across processes, every call first exchanges a small descriptor over MPI's control
// channel (runtime/mpi/control_channel.h, runtime/collective_agreement.h), before any NCCL call:
// processes that disagree (op, dtype, shapes, kind) all throw CommunicationError naming the
// collective and both calls, and a process that has left the job is found, not waited for.
//
// Errors and hangs: after issuing a collective the host polls the streams and
// ncclCommGetAsyncError; an NCCL error, or no completion within the timeout
// (DTENSOR_NCCL_TIMEOUT seconds, default 300), aborts the group's communicators
// (ncclCommAbort, so the peers' pending calls fail instead of hanging), drops them from the cache
// and throws CommunicationError "[all_reduce] NCCL ... on group [0,1,2,3]: <NCCL's message>".
//
// Semantics as the other backends (runtime/collective_backend.h): uneven all-gather and
// reduce-scatter (through per-member broadcasts, and an all-reduce then a local slice), all-to-all
// through grouped send/receive; bool reduces as bytes (max = or, min = and). NCCL's max/min of
// floats do not promise NaN propagation. Thread-safety: one collective at a time (a lock).
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

std::shared_ptr<CollectiveBackend> make_nccl_backend();

// Registers GPU backends: the in-process GPU backend as intra, NCCL as inter when this process is
// one of several (MPI must be initialised, as dtensor::Runtime does under mpirun).
void register_nccl_gpu_backends();

}  // namespace dtensor
