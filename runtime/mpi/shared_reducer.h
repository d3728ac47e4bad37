// SharedReducer: the all-reduce of the processes of one host through memory that all of them map,
// with no MPI call in it.
//
// Why: Open MPI moves a message only while some thread of each process spins inside an MPI call.
// A communication thread that overlaps a gradient bucket with backward must then either spin
// (taking the core from backward whenever it waits for another process) or poll now and then
// (and the transfer crawls). Here each process does its own share of the work whenever it runs
// (copy in, combine its chunk, copy the other chunks out) and sleeps on a futex while it waits
// for the others, so a wait gives the core back and a busy host loses nothing to spinning. It is
// also faster than Open MPI's shared-memory all-reduce above a few hundred KB
// (bench/mpi_allreduce).
//
// Layout: process p owns segment p, segment_bytes(P) long: a header with its step counter, the
// flag others set before they sleep on that counter and its check word, then two areas of
// area_bytes(P) used in turn. A bucket is cut into pieces that fit an area; for each piece:
//   1. each process copies its inputs into its area and arrives;
//   2. once all arrived, process p combines chunk p of every tensor run (chunk_range's split),
//      reading every area, writing the result to its own output and back into its own area;
//      all arrive again;
//   3. each copies the other chunks out of their owners' areas.
// The next piece uses the other area, so nobody overwrites an area another may still read: to
// reuse an area a process must first have passed the next piece's first arrival, which the others
// reach only after step 3.
//
// Results: every element is folded in process order, ((v0 op v1) op v2) ..., on the process that
// owns its chunk and copied to the others, so every process holds the same bits whatever the
// bucket sizes and piece boundaries (bf16 folds in f32 and rounds once). With two processes these
// are the bits MPI_Allreduce gives (sum and NaN-propagating max/min of two terms commute).
//
// All processes must reduce the same tensors (shapes, dtypes, order) with the same op, as with
// MPI. Each piece's description is checked against every other process's: a mismatch throws
// CommunicationError on all of them instead of mixing unrelated bytes.
//
// exchange() lets the processes trade a small message (the MPI backend's agreement on each
// collective, runtime/collective_agreement.h) the same way: one arrival, asleep while waiting.
//
// Thread-safety: one call at a time per SharedReducer (the MPI backend serialises them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

class SharedReducer {
 public:
  // Largest message exchange() trades.
  static constexpr size_t kExchangeBytes = 320;
  static constexpr size_t kHeaderBytes = 128 + 2 * kExchangeBytes;
  // Bytes of one area for `processes` processes: 8 MiB shared among them, 64 KiB at least.
  static size_t area_bytes(int processes);
  // Bytes of one process's segment.
  static size_t segment_bytes(int processes) { return kHeaderBytes + 2 * area_bytes(processes); }

  // segments[p]: process p's segment, segment_bytes() long, 64-byte aligned, its header zeroed
  // before any process uses it; `self` says which one is this process's. Two processes at least.
  SharedReducer(const std::vector<void*>& segments, int self);
  SharedReducer(const SharedReducer&) = delete;
  SharedReducer& operator=(const SharedReducer&) = delete;

  // outputs[i] = op over every process of inputs[i]. outputs[i] has inputs[i]'s shape and dtype.
  // `function` names the caller in errors.
  void all_reduce(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs, ReduceOp op,
                  const char* function);

  // Every process publishes `bytes` bytes (at most kExchangeBytes, the same on all) from `mine`;
  // all[p * bytes ...] receives process p's. Every process must call it at the same point of its
  // sequence of calls. While it waits for process p (asleep, every 2 ms or so) it calls
  // waiting_for(p), which may throw to give up (the reducer is then unusable).
  void exchange(const void* mine, size_t bytes, void* all,
                const std::function<void(int process)>& waiting_for);

 private:
  struct Run;  // a stretch of one tensor's elements inside a piece
  struct Header;
  void reduce_piece(const std::vector<Run>& runs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs, ReduceOp op, const char* function);
  // Publishes this process's next step and waits (spinning briefly, then asleep) until every
  // other process has published it too.
  void arrive_and_wait(const std::function<void(int process)>* waiting_for = nullptr);
  char* area(int process, uint64_t piece) const;

  std::vector<char*> segments_;
  int self_;
  size_t area_bytes_;
  uint32_t step_ = 0;
  uint64_t pieces_ = 0;        // pieces reduced so far: which area the next one uses
  uint64_t bucket_check_ = 0;  // the current bucket's description
};

}  // namespace dtensor
