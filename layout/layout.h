// Layout: how each dimension of a tensor maps onto a mesh.
//
// One sharding spec per tensor dim: the name of a mesh dim (the tensor dim is split into
// contiguous chunks along it) or "unsharded". A mesh dim appears at most once. Mesh dims that no
// tensor dim uses are replicated, unless they are *partial*: then each device along that mesh dim
// holds one term of a pending reduction (sum, max or min) and the logical value is the reduction
// of the terms.
//
// Uneven dims follow chunk semantics: a dim of size n split k ways gives shards of size
// ceil(n/k) at offsets c*ceil(n/k); the last shards are shorter or empty.
//
// Text form (TF DTensor's, plus an extension for partial dims):
//   "sharding_specs:batch,unsharded, mesh:|batch=8|0,...,7|0,...,7|/job:localhost/...CPU:0,..."
//   "sharding_specs:unsharded,model, partial:sum(batch), mesh:|batch=2,model=4|..."
// The partial part lists `op(mesh_dim)` entries in mesh-dim order, comma separated; it is
// omitted when there are none.
//
// A Layout is an immutable value, cheap to copy; all methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/mesh.h"
#include "runtime/reduce_op.h"
#include "runtime/shape.h"

namespace dtensor {

struct PartialDim {
  std::string mesh_dim;
  ReduceOp op = ReduceOp::kSum;
};

class Layout {
 public:
  static constexpr const char* kUnsharded = "unsharded";

  // Throws LayoutError for unknown or repeated mesh dims, or a partial dim also used to shard.
  Layout(std::vector<std::string> sharding_specs, Mesh mesh, std::vector<PartialDim> partial = {});

  static Layout replicated(const Mesh& mesh, int64_t rank);
  // Tensor dim `axis` sharded along mesh dim `mesh_dim`, the rest unsharded.
  static Layout batch_sharded(const Mesh& mesh, const std::string& mesh_dim, int64_t rank,
                              int64_t axis = 0);
  // The last tensor dim sharded along `mesh_dim`.
  static Layout inner_sharded(const Mesh& mesh, const std::string& mesh_dim, int64_t rank);
  // Parses the text form; throws LayoutError (or MeshError for the mesh part).
  static Layout from_string(std::string_view text);

  const Mesh& mesh() const { return mesh_; }
  int64_t rank() const { return static_cast<int64_t>(specs_.size()); }
  const std::vector<std::string>& sharding_specs() const { return specs_; }
  // Queries taking a tensor dim throw LayoutError for a dim outside 0..rank()-1; those taking a
  // device id throw LayoutError for an id outside the mesh.
  const std::string& spec(int64_t dim) const {
    check_dim(dim, "Layout::spec");
    return specs_[static_cast<size_t>(dim)];
  }
  // The mesh dim index tensor dim `dim` is sharded along, or -1 if unsharded.
  int64_t mesh_dim_of(int64_t dim) const {
    check_dim(dim, "Layout::mesh_dim_of");
    return mesh_dim_of_[static_cast<size_t>(dim)];
  }
  bool is_sharded(int64_t dim) const {
    check_dim(dim, "Layout::is_sharded");
    return mesh_dim_of_[static_cast<size_t>(dim)] >= 0;
  }
  // The tensor dim sharded along mesh dim index `mesh_dim`, or -1; throws LayoutError for an
  // index outside 0..mesh().rank()-1.
  int64_t tensor_dim_of(int64_t mesh_dim) const;
  // Number of shards of tensor dim `dim` (1 if unsharded).
  int64_t num_shards(int64_t dim) const;
  std::vector<int64_t> num_shards_per_dim() const;

  // Partial state.
  const std::vector<PartialDim>& partial() const { return partial_; }
  bool is_partial() const { return partial_mask_ != 0; }
  MeshDimMask partial_mask() const { return partial_mask_; }
  // Mesh dims used for sharding.
  MeshDimMask sharded_mask() const { return sharded_mask_; }
  // Mesh dims along which every device holds the same value (neither sharded nor partial).
  MeshDimMask replicated_mask() const;
  bool is_fully_replicated() const { return sharded_mask_ == 0 && partial_mask_ == 0; }

  // Shard geometry for a device, with chunk semantics for uneven dims. `global_shape` must have
  // rank() dims (LayoutError otherwise).
  ShardRange shard_range(const Shape& global_shape, int64_t dim, int64_t device_id) const;
  Shape shard_shape(const Shape& global_shape, int64_t device_id) const;
  std::vector<int64_t> shard_offset(const Shape& global_shape, int64_t device_id) const;
  // Throws LayoutError naming `function` if `global_shape` does not have rank() dims, and
  // ShapeError if it has a negative dim or too many elements (runtime/shape.h).
  void check_shape(const Shape& global_shape, const char* function) const;

  // Derived layouts. delete_dims takes dims in -rank()..rank()-1 (negative: from the end).
  Layout delete_dims(std::vector<int64_t> dims) const;  // TF's Layout.delete
  Layout with_spec(int64_t dim, std::string spec) const;
  Layout with_partial(std::vector<PartialDim> partial) const;
  Layout without_partial() const { return with_partial({}); }
  Layout with_mesh(const Mesh& mesh) const;

  std::string to_string() const;
  // "[batch,unsharded] partial:sum(model)" without the mesh, for short messages.
  std::string short_string() const;

  friend bool operator==(const Layout& a, const Layout& b);
  friend bool operator!=(const Layout& a, const Layout& b) { return !(a == b); }

 private:
  void check_dim(int64_t dim, const char* function) const {
    if (dim < 0 || dim >= rank()) throw_dim_out_of_range(dim, function);
  }
  [[noreturn]] void throw_dim_out_of_range(int64_t dim, const char* function) const;
  void check_device(int64_t device_id, const char* function) const;
  ShardRange shard_range_unchecked(const Shape& global_shape, int64_t dim, int64_t device_id) const;

  Mesh mesh_;
  std::vector<std::string> specs_;
  std::vector<int64_t> mesh_dim_of_;
  std::vector<PartialDim> partial_;  // sorted by mesh dim index
  MeshDimMask partial_mask_ = 0;
  MeshDimMask sharded_mask_ = 0;
};

}  // namespace dtensor
