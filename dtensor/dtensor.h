// DTensor: one global tensor stored as local shards, one per device of its mesh that this process
// owns.
//
// The global shape, dtype and layout describe the logical value; shard i (local order, see
// Mesh::local_device_ids) holds the box layout.shard_shape/shard_offset of device i. Under a
// partial layout each device holds one term and the logical value is their reduction. Devices
// that differ only along replicated mesh dims hold identical shards (identical terms, too).
//
// A DTensor is an immutable value: copies share the shards, and shards may share storage with
// each other (replicated shards of in-process devices are stored once). Nothing writes a shard in
// place, so sharing is safe. Const methods are thread-safe.
#pragma once

#include <string>
#include <vector>

#include "layout/layout.h"
#include "runtime/tensor.h"

namespace dtensor {

class DTensor {
 public:
  // Validates the shards against the layout: one per local device, each of the layout's shard
  // shape for `shape`, of `dtype`, tagged with the mesh's device type (ShapeError, DTypeError,
  // LayoutError, InvalidArgumentError naming "DTensor"). Shards are re-tagged with their device.
  DTensor(Shape shape, DType dtype, Layout layout, std::vector<Tensor> shards);

  // For code that built the shards from the layout itself (relayout, ops): checks nothing.
  static DTensor from_trusted_shards(Shape shape, DType dtype, Layout layout,
                                     std::vector<Tensor> shards);

  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t num_elements() const { return dtensor::num_elements(shape_); }
  DType dtype() const { return dtype_; }
  const Layout& layout() const { return layout_; }
  const Mesh& mesh() const { return layout_.mesh(); }
  const std::vector<Tensor>& shards() const { return shards_; }
  // Identity of this value: copies share it, every op result gets a new one, and every value a
  // DVariable holds has the variable's one value id. Autograd links recorded ops through it.
  int64_t id() const { return id_; }
  // The shard of local device `local_index` (InvalidArgumentError when out of range).
  const Tensor& shard(int64_t local_index) const {
    if (local_index < 0 || local_index >= static_cast<int64_t>(shards_.size())) {
      throw_bad_shard_index(local_index);
    }
    return shards_[static_cast<size_t>(local_index)];
  }

  // "f32[784,700] sharding_specs:unsharded,unsharded, mesh:|batch=8|..."
  std::string to_string() const;
  // "f32[784,700] [unsharded,unsharded]" (no mesh), for messages.
  std::string short_string() const;

 private:
  friend class DVariable;  // gives its values its own id (autograd tracks the variable)
  DTensor with_id(int64_t id) const {
    DTensor t = *this;
    t.id_ = id;
    return t;
  }
  [[noreturn]] void throw_bad_shard_index(int64_t local_index) const;
  struct Trusted {};
  DTensor(Trusted, Shape shape, DType dtype, Layout layout, std::vector<Tensor> shards)
      : shape_(std::move(shape)),
        dtype_(dtype),
        layout_(std::move(layout)),
        shards_(std::move(shards)),
        id_(next_id()) {}
  static int64_t next_id();

  Shape shape_;
  DType dtype_;
  Layout layout_;
  std::vector<Tensor> shards_;
  int64_t id_ = 0;
};

// A DTensor from one component per local device (in local order). The global shape is inferred:
// along a sharded dim, the sum of the components' sizes over the shards of that dim (all devices
// local) or the first component's size times the number of shards (multi-process; pass the shape
// explicitly for uneven dims there).
DTensor pack(std::vector<Tensor> components, const Layout& layout);
DTensor pack(std::vector<Tensor> components, const Layout& layout, const Shape& global_shape);

// The local shards, in local order.
std::vector<Tensor> unpack(const DTensor& tensor);

// Splits a global tensor (present in every process) by `layout`. Devices holding the same box
// share one buffer; a box covering the whole tensor shares the input's storage. Under a partial
// sum layout the first device along the partial dims holds the value and the others zeros; under
// max/min every device holds it.
DTensor distribute(const Tensor& global, const Layout& layout);

// The full logical value (partial terms reduced), for inspection and tests.
Tensor to_global(const DTensor& tensor);

// Device of the global id on `mesh`.
inline Device mesh_device(const Mesh& mesh, int64_t device_id) {
  return Device{mesh.device_type(), device_id};
}

}  // namespace dtensor
