#include "runtime/collective_agreement.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t mix(uint64_t hash, int64_t value) {
  return (hash ^ static_cast<uint64_t>(value)) * kFnvPrime;
}

// What a descriptor records of one tensor.
struct Piece {
  DType dtype;
  const Shape* shape;
};

// Dtype and shape of every tensor, the free axis's size left out.
int64_t signature_of(const std::vector<Piece>& pieces, int64_t free_axis) {
  uint64_t hash = 14695981039346656037ull;
  for (const Piece& p : pieces) {
    hash = mix(hash, static_cast<int64_t>(p.dtype));
    hash = mix(hash, static_cast<int64_t>(p.shape->size()));
    for (size_t d = 0; d < p.shape->size(); ++d) {
      hash = mix(hash, static_cast<int64_t>(d) == free_axis ? -1 : (*p.shape)[d]);
    }
  }
  return static_cast<int64_t>(hash);
}

CollectiveDescriptor describe_pieces(CollectiveKind kind, const std::vector<Piece>& pieces,
                                     int64_t free_axis) {
  CollectiveDescriptor d;
  d.kind = static_cast<int64_t>(kind);
  d.tensors = static_cast<int64_t>(pieces.size());
  for (const Piece& p : pieces) d.elements += num_elements(*p.shape);
  d.free_axis = free_axis;
  d.signature = signature_of(pieces, free_axis);
  if (!pieces.empty()) {
    const Shape& first = *pieces[0].shape;
    const int64_t rank = static_cast<int64_t>(first.size());
    d.dtype = static_cast<int64_t>(pieces[0].dtype);
    d.rank = rank;
    for (int64_t i = 0; i < rank && i < CollectiveDescriptor::kInlineDims; ++i) {
      d.dims[static_cast<size_t>(i)] = first[static_cast<size_t>(i)];
    }
    if (free_axis >= 0 && free_axis < rank) d.free_size = first[static_cast<size_t>(free_axis)];
  }
  return d;
}

CollectiveDescriptor describe_tensors(CollectiveKind kind,
                                      const std::vector<const Tensor*>& tensors,
                                      int64_t free_axis) {
  std::vector<Piece> pieces;
  for (const Tensor* t : tensors) pieces.push_back({t->dtype(), &t->shape()});
  return describe_pieces(kind, pieces, free_axis);
}

std::string tensor_text(const CollectiveDescriptor& d) {
  std::string dims;
  if (d.rank > CollectiveDescriptor::kInlineDims) {
    dims = fmt::format("of rank {}", d.rank);
  } else {
    dims = shape_to_string(d.shape());
  }
  const std::string dtype = d.dtype >= 0 ? std::string(dtype_name(static_cast<DType>(d.dtype)))
                                         : fmt::format("dtype {}", d.dtype);
  return dtype + " " + dims;
}

std::string op_text(int64_t op) {
  if (op >= 0 && op <= static_cast<int64_t>(ReduceOp::kMin)) {
    return std::string(reduce_op_name(static_cast<ReduceOp>(op)));
  }
  return fmt::format("op {}", op);
}

}  // namespace

Shape CollectiveDescriptor::shape() const {
  DTENSOR_CHECK(rank >= 0 && rank <= kInlineDims);
  return Shape(dims.begin(), dims.begin() + rank);
}

std::string CollectiveDescriptor::to_string() const {
  switch (static_cast<CollectiveKind>(kind)) {
    case CollectiveKind::kAllReduce:
      return fmt::format("all_reduce({}) of {}", op_text(op), tensor_text(*this));
    case CollectiveKind::kAllGather:
      return fmt::format("all_gather(axis {}) of {}", axis, tensor_text(*this));
    case CollectiveKind::kReduceScatter:
      return fmt::format("reduce_scatter({}, axis {}) of {}", op_text(op), axis,
                         tensor_text(*this));
    case CollectiveKind::kAllToAll:
      return fmt::format("all_to_all(split axis {}, concat axis {}) of {}", axis, axis2,
                         tensor_text(*this));
    case CollectiveKind::kBroadcast:
      return rank < 0 ? fmt::format("broadcast(root {})", axis)
                      : fmt::format("broadcast(root {}) of {}", axis, tensor_text(*this));
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kAllReduceStart:
      return fmt::format("all_reduce_start({}) of {} tensors, {} elements, signature {:016x}",
                         op_text(op), tensors, elements, static_cast<uint64_t>(signature));
  }
  return fmt::format("an unknown collective (kind {})", kind);
}

bool CollectiveDescriptor::agrees_with(const CollectiveDescriptor& other) const {
  if (kind != other.kind) return false;
  if (static_cast<CollectiveKind>(kind) == CollectiveKind::kBroadcast) {
    return axis == other.axis;  // only the root's tensor matters
  }
  CollectiveDescriptor a = *this, b = other;
  for (CollectiveDescriptor* d : {&a, &b}) {
    if (d->free_axis >= 0) {
      d->elements = 0;
      d->free_size = 0;
      if (d->free_axis < kInlineDims) d->dims[static_cast<size_t>(d->free_axis)] = 0;
    }
  }
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

CollectiveDescriptor describe_all_reduce(const Tensor& in, ReduceOp op) {
  CollectiveDescriptor d = describe_tensors(CollectiveKind::kAllReduce, {&in}, -1);
  d.op = static_cast<int64_t>(op);
  return d;
}

CollectiveDescriptor describe_all_gather(const Tensor& in, int64_t axis) {
  return describe_all_gather(in.dtype(), in.shape(), axis);
}

CollectiveDescriptor describe_all_gather(DType dtype, const Shape& shape, int64_t axis) {
  CollectiveDescriptor d = describe_pieces(CollectiveKind::kAllGather, {{dtype, &shape}}, axis);
  d.axis = axis;
  return d;
}

CollectiveDescriptor describe_reduce_scatter(const Tensor& in, ReduceOp op, int64_t axis) {
  CollectiveDescriptor d = describe_tensors(CollectiveKind::kReduceScatter, {&in}, -1);
  d.op = static_cast<int64_t>(op);
  d.axis = axis;
  return d;
}

CollectiveDescriptor describe_all_to_all(const Tensor& in, int64_t split_axis,
                                         int64_t concat_axis) {
  return describe_all_to_all(in.dtype(), in.shape(), split_axis, concat_axis);
}

CollectiveDescriptor describe_all_to_all(DType dtype, const Shape& shape, int64_t split_axis,
                                         int64_t concat_axis) {
  CollectiveDescriptor d =
      describe_pieces(CollectiveKind::kAllToAll, {{dtype, &shape}}, concat_axis);
  d.axis = split_axis;
  d.axis2 = concat_axis;
  return d;
}

CollectiveDescriptor describe_broadcast(const Tensor* root_tensor, int64_t root) {
  CollectiveDescriptor d = root_tensor != nullptr
                               ? describe_tensors(CollectiveKind::kBroadcast, {root_tensor}, -1)
                               : describe_tensors(CollectiveKind::kBroadcast, {}, -1);
  d.axis = root;
  return d;
}

CollectiveDescriptor describe_barrier() {
  return describe_tensors(CollectiveKind::kBarrier, {}, -1);
}

CollectiveDescriptor describe_all_reduce_start(const std::vector<Tensor>& bucket, ReduceOp op) {
  std::vector<const Tensor*> tensors;
  for (const Tensor& t : bucket) tensors.push_back(&t);
  CollectiveDescriptor d = describe_tensors(CollectiveKind::kAllReduceStart, tensors, -1);
  d.op = static_cast<int64_t>(op);
  return d;
}

void check_agreement(const char* function, const std::vector<CollectiveDescriptor>& all,
                     const std::vector<int64_t>& members, size_t self) {
  DTENSOR_CHECK(all.size() == members.size() && self < all.size());
  const CollectiveDescriptor& mine = all[self];
  for (size_t p = 0; p < all.size(); ++p) {
    if (all[p].agrees_with(mine)) continue;
    throw_error<CommunicationError>(
        function,
        "the processes disagree on a collective: process {} (this one) calls {}, process {} "
        "calls {}; every process must make the same collective calls, with the same shapes, "
        "dtypes and op, in the same order",
        members[self], mine.to_string(), members[p], all[p].to_string());
  }
}

}  // namespace dtensor
