// SharedPair: the all-reduce of two processes on one host through memory that both map, with no
// MPI call in it.
//
// Why: Open MPI moves a message only while some thread of each process spins inside an MPI call.
// A communication thread that overlaps a gradient bucket with backward must then either spin
// (taking the core from backward whenever it waits for the other process) or poll now and then
// (and the transfer crawls). Here each process does its own share of the work whenever it runs
// (copy in, add its half, copy the other half out) and sleeps on a futex while it waits for the
// other, so a wait gives the core back and a busy host loses nothing to spinning.
//
// Layout: each process owns one segment of segment_bytes(): a header with its step counter, the
// flag the other process sets before it sleeps on that counter, and its check word, then two areas of kAreaBytes used in turn. A bucket is cut into pieces that fit
// an area; for each piece:
//   1. each process copies its inputs into its area and arrives;
//   2. once both arrived, process 0 combines the first half of every tensor run, process 1 the
//      second, reading both areas, writing the result to its own output and back into its own
//      area; both arrive again;
//   3. each copies the other's half out of the other's area.
// The next piece uses the other area, so nobody overwrites an area the other may still read: to
// reuse an area a process must first have passed the next piece's first arrival, which the other
// reaches only after step 3.
//
// Results: every element is combined as op(process 0's value, process 1's value) on the process
// that owns its half and copied to the other, so both processes hold the same bits, and (for
// two operands, sum and NaN-propagating max/min being commutative) the bits MPI_Allreduce gives.
//
// Both processes must reduce the same tensors (shapes, dtypes, order) with the same op, as with
// MPI. Each piece's description is checked against the other process's: a mismatch throws
// CommunicationError on both instead of mixing unrelated bytes.
//
// Thread-safety: one call at a time per SharedPair (the MPI backend serialises them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

class SharedPair {
 public:
  static constexpr size_t kHeaderBytes = 128;
  static constexpr size_t kAreaBytes = size_t{4} << 20;
  // Bytes of one process's segment.
  static constexpr size_t segment_bytes() { return kHeaderBytes + 2 * kAreaBytes; }

  // `mine` and `peer`: the two processes' segments, each segment_bytes() long, 64-byte aligned
  // and zeroed before either process uses them; `self` (0 or 1) says which one this process is.
  SharedPair(void* mine, void* peer, int self);
  SharedPair(const SharedPair&) = delete;
  SharedPair& operator=(const SharedPair&) = delete;

  // outputs[i] = op over both processes of inputs[i]. outputs[i] has inputs[i]'s shape and
  // dtype. `function` names the caller in errors.
  void all_reduce(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs, ReduceOp op,
                  const char* function);

 private:
  struct Run;  // a stretch of one tensor's elements inside a piece
  void reduce_piece(const std::vector<Run>& runs, const std::vector<Tensor>& inputs,
                    std::vector<Tensor>& outputs, ReduceOp op, const char* function);
  // Publishes this process's next step and waits (spinning briefly, then asleep) for the other
  // to publish it too.
  void arrive_and_wait();
  char* area(char* segment, uint64_t piece) const;

  char* mine_;
  char* peer_;
  int self_;
  std::atomic<uint32_t>* my_step_;
  std::atomic<uint32_t>* peer_step_;
  // Set in a segment by the other process before it sleeps on that segment's step counter.
  std::atomic<uint32_t>* my_sleeper_;
  std::atomic<uint32_t>* peer_sleeper_;
  uint64_t* my_check_;
  const uint64_t* peer_check_;
  uint32_t step_ = 0;
  uint64_t pieces_ = 0;       // pieces reduced so far: which area the next one uses
  uint64_t bucket_check_ = 0;  // the current bucket's description
};

}  // namespace dtensor
