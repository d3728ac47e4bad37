// Agreement between processes on a collective before any data moves.
//
// Every process of a group must make the same collective calls (kind, op, dtype, shapes, piece
// counts) in the same order. A transport that crosses processes cannot tell from the data alone
// that they do not: MPI truncates or errors on some ranks, sums unrelated bytes on others, or
// waits forever for a message no one sends. So a backend first exchanges one small fixed-size
// CollectiveDescriptor per process (one small collective: MPI_Allgather, shared memory, NCCL) and
// calls check_agreement on the gathered descriptors: every process sees the same descriptors, so
// either all go on or all throw the same kind of error, and all stay in step.
//
// A descriptor records what must agree and, where the collective allows members to differ along
// one axis (all-gather-v, all-to-all-v), that axis's size apart: the backends read the other
// members' sizes from it instead of exchanging them separately.
//
// Plain values; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

enum class CollectiveKind : int64_t {
  kAllReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kAllToAll = 4,
  kBroadcast = 5,
  kBarrier = 6,
  kAllReduceStart = 7,  // a bucket of all-reduces
};

// 40 64-bit words (320 bytes): the same size for every collective, so that processes calling
// different collectives still exchange matching messages and find out.
struct CollectiveDescriptor {
  static constexpr int kInlineDims = 29;
  static constexpr int kWords = 40;

  int64_t kind = 0;        // CollectiveKind
  int64_t op = -1;         // ReduceOp, or -1
  int64_t dtype = -1;      // DType (the first tensor's in a bucket), or -1
  int64_t axis = -1;       // gather, scatter or split axis; broadcast root
  int64_t axis2 = -1;      // all-to-all concat axis
  int64_t tensors = 0;     // tensors (pieces) in the call
  int64_t elements = 0;    // their elements, all together
  int64_t free_axis = -1;  // the axis whose size may differ between members, or -1
  int64_t free_size = 0;   // this member's size along free_axis
  int64_t signature = 0;   // hash of every tensor's dtype and shape (free axis left out)
  int64_t rank = -1;       // the (first) tensor's rank, or -1
  std::array<int64_t, kInlineDims> dims{};  // its first kInlineDims dims (free axis included)

  // Shape of the (first) tensor; the dims past kInlineDims are not kept (InternalError).
  Shape shape() const;
  // "all_reduce(sum) of f32 [10]", "all_gather(axis 0) of f32 [4,3]", "barrier", ...
  std::string to_string() const;
  // Whether two members' descriptors describe the same collective (free axis sizes aside).
  bool agrees_with(const CollectiveDescriptor& other) const;
};
static_assert(sizeof(CollectiveDescriptor) == CollectiveDescriptor::kWords * sizeof(int64_t));

CollectiveDescriptor describe_all_reduce(const Tensor& in, ReduceOp op);
CollectiveDescriptor describe_all_gather(const Tensor& in, int64_t axis);
// From a member's dtype and shape (a backend that learns the members' shapes itself).
CollectiveDescriptor describe_all_gather(DType dtype, const Shape& shape, int64_t axis);
CollectiveDescriptor describe_all_to_all(DType dtype, const Shape& shape, int64_t split_axis,
                                         int64_t concat_axis);
CollectiveDescriptor describe_reduce_scatter(const Tensor& in, ReduceOp op, int64_t axis);
CollectiveDescriptor describe_all_to_all(const Tensor& in, int64_t split_axis, int64_t concat_axis);
// The root describes its tensor; the others only the root (their tensors are placeholders).
CollectiveDescriptor describe_broadcast(const Tensor* root_tensor, int64_t root);
CollectiveDescriptor describe_barrier();
CollectiveDescriptor describe_all_reduce_start(const std::vector<Tensor>& bucket, ReduceOp op);

// Throws CommunicationError on a mismatch:
//   "[function] the processes disagree on a collective: process S (this one) calls <mine>,
//    process Q calls <theirs>; every process must make the same collective calls, with the same
//    shapes, dtypes and op, in the same order"
// all[p] is member p's descriptor, members[p] its process index, self this process's position.
// Q is the first member whose descriptor disagrees with this process's.
void check_agreement(const char* function, const std::vector<CollectiveDescriptor>& all,
                     const std::vector<int64_t>& members, size_t self);

}  // namespace dtensor
