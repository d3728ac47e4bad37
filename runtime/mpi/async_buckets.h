// The asynchronous bucket path of the MPI backend: all_reduce_start hands a bucket to the
// session's communication thread (runtime/mpi/comm_thread.h), which reduces it while the caller
// computes. There, under the session's lock, the members first agree on the bucket (when
// agreement is on); then the layer that started it reduces it: through shared memory
// (runtime/mpi/shared_memory_backend.h) or over the network (reduce_bucket_over_mpi). Either way
// the sums are the blocking all_reduce's of each tensor, bit for bit. Every other call of the
// backend first drains the thread (MpiSession::exclusive), so each process issues its MPI calls
// in program order.
//
// DTENSOR_OVERLAP_TRACE=1 prints, for each bucket when it is waited for, when the caller queued
// it, when the thread began and ended its reduction, and when the caller began and ended waiting
// (the system-wide monotonic clock in ms, comparable between the processes of one host).
//
// Thread-safety: a pending bucket is owned by one thread at a time (PendingCollective's rule).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/collective_backend.h"
#include "runtime/mpi/mpi_session.h"

namespace dtensor {

// A bucket on the communication thread: its tensors, their results (allocated by the caller:
// the tensor pool is thread-safe, but allocating there keeps the worker to communication), the
// error its reduction threw, if any. Shared by the caller's handle and the queued work, so a
// handle dropped unfinished leaves nothing dangling.
struct Bucket {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::exception_ptr error;
  int64_t process = 0, bytes = 0;
  double queued = 0, began = 0, ended = 0;  // trace timestamps
};

// Runs on the communication thread after the members agreed, without the session's lock (take it
// for MPI calls). Throws to fail the bucket: wait() rethrows.
using BucketReduction = std::function<void(Bucket& bucket)>;

// Checks the bucket (one member per process), then queues it: agreement, then `reduce`. An empty
// bucket agrees on the caller's thread and is returned done. Requires session.threaded().
std::unique_ptr<PendingCollective> start_bucket(MpiSession& session, std::string_view backend,
                                                const Group& group,
                                                const std::vector<std::vector<Tensor>>& inputs,
                                                ReduceOp op, BucketReduction reduce);

// The network reduction of a bucket, on the communication thread: one blocking MPI_Allreduce per
// tensor in order (the calls a blocking all_reduce of each tensor makes), or, for two processes,
// every tensor's MPI_Iallreduce at once tested with yields in between: a blocking call spins
// while it waits for the other process, and with no idle core that spin takes the core from this
// process's own computation. With two members every algorithm adds the same two terms, so the
// sums are the blocking path's bit for bit. Measured against the other modes in
// docs/benchmarks.md ("Overlapped gradient reduction").
void reduce_bucket_over_mpi(MpiSession& session, Bucket& bucket, const std::vector<int>& ranks,
                            ReduceOp op);

// DTENSOR_OVERLAP_TRACE=1: the span of a blocking all-reduce, begun at `began` (trace_clock_ms).
bool overlap_trace_on();
double trace_clock_ms();
void trace_blocking(int64_t process, size_t bytes, double began);

}  // namespace dtensor
