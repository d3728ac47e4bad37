#include "dtensor/dtensor.h"

#include <fmt/format.h>

#include <atomic>
#include <map>

#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "runtime/block.h"

namespace dtensor {

int64_t DTensor::next_id() {
  static std::atomic<int64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

DTensor::DTensor(Shape shape, DType dtype, Layout layout, std::vector<Tensor> shards)
    : shape_(std::move(shape)),
      dtype_(dtype),
      layout_(std::move(layout)),
      shards_(std::move(shards)),
      id_(next_id()) {
  validate_shape(shape_, "DTensor");
  layout_.check_shape(shape_, "DTensor");
  const Mesh& mesh = layout_.mesh();
  if (static_cast<int64_t>(shards_.size()) != mesh.num_local_devices()) {
    throw_error<InvalidArgumentError>(
        "DTensor", "got {} components for the {} local devices of mesh {} (layout {})",
        shards_.size(), mesh.num_local_devices(), mesh.dims_string(), layout_.short_string());
  }
  const auto& ids = mesh.local_device_ids();
  for (size_t i = 0; i < shards_.size(); ++i) {
    Tensor& shard = shards_[i];
    if (shard.dtype() != dtype_) {
      throw_error<DTypeError>("DTensor", "component {} is {}, expected {}", i, shard.to_string(),
                              dtype_name(dtype_));
    }
    if (shard.device().type != mesh.device_type()) {
      throw_error<InvalidArgumentError>("DTensor", "component {} is on {}, the mesh has {} devices",
                                        i, device_to_string(shard.device()),
                                        device_type_name(mesh.device_type()));
    }
    Shape expected = layout_.shard_shape(shape_, ids[i]);
    if (shard.shape() != expected) {
      throw_error<ShapeError>(
          "DTensor",
          "component {} has shape {}, but device {} holds {} of global shape {} under {}", i,
          shape_to_string(shard.shape()), ids[i], shape_to_string(expected),
          shape_to_string(shape_), layout_.short_string());
    }
    if (shard.memory_space() != memory_space_of(shard.device().type)) {
      throw_error<InvalidArgumentError>(
          "DTensor", "component {} is tagged {} but lives in {} memory", i,
          device_to_string(shard.device()), memory_space_name(shard.memory_space()));
    }
    const Device device = mesh_device(mesh, ids[i]);
    if (shard.device() != device) {
      // Retagging moves no bytes: only a device that can use the buffer where it is may take it.
      if (!same_memory_space(shard.device(), device)) {
        throw_error<InvalidArgumentError>(
            "DTensor", "component {} is on {}, but mesh device {} is {}, another memory space", i,
            device_to_string(shard.device()), ids[i], device_to_string(device));
      }
      shard = shard.with_device(device);
    }
  }
}

DTensor DTensor::from_trusted_shards(Shape shape, DType dtype, Layout layout,
                                     std::vector<Tensor> shards) {
  return DTensor(Trusted{}, std::move(shape), dtype, std::move(layout), std::move(shards));
}

std::string DTensor::to_string() const {
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_to_string(shape_), layout_.to_string());
}

std::string DTensor::short_string() const {
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_to_string(shape_),
                     layout_.short_string());
}

namespace {

[[noreturn]] void throw_global_shape_overflow(const std::vector<Tensor>& components,
                                              const Layout& layout, int64_t dim) {
  throw_error<ShapeError>("pack", "global size of dim {} overflows: components like {} under {}",
                          dim, components[0].to_string(), layout.short_string());
}

Shape infer_global_shape(const std::vector<Tensor>& components, const Layout& layout) {
  const Mesh& mesh = layout.mesh();
  if (static_cast<int64_t>(components.size()) != mesh.num_local_devices()) {
    throw_error<InvalidArgumentError>(
        "pack", "got {} components for the {} local devices of mesh {} (layout {})",
        components.size(), mesh.num_local_devices(), mesh.dims_string(), layout.short_string());
  }
  if (components.empty()) throw_error<InvalidArgumentError>("pack", "no components");
  if (components[0].rank() != layout.rank()) {
    throw_error<ShapeError>("pack", "component shape {} has rank {}, layout {} has rank {}",
                            shape_to_string(components[0].shape()), components[0].rank(),
                            layout.short_string(), layout.rank());
  }
  Shape shape = components[0].shape();
  const bool all_local = mesh.num_processes() == 1;
  for (int64_t d = 0; d < layout.rank(); ++d) {
    if (!layout.is_sharded(d)) continue;
    const int64_t m = layout.mesh_dim_of(d);
    if (!all_local) {
      if (!checked_mul(shape[d], layout.num_shards(d), &shape[d])) {
        throw_global_shape_overflow(components, layout, d);
      }
      continue;
    }
    // Sum the sizes of the shards along mesh dim m, taking the device with coordinate c along m
    // and zero elsewhere.
    int64_t total = 0;
    std::vector<int64_t> coords(static_cast<size_t>(mesh.rank()), 0);
    for (int64_t c = 0; c < mesh.dims()[m].size; ++c) {
      coords[m] = c;
      int64_t id = mesh.device_id(coords);
      const Tensor& comp = components[static_cast<size_t>(mesh.local_index(id))];
      if (comp.rank() != layout.rank()) break;  // reported by the DTensor constructor
      if (!checked_add(total, comp.dim(d), &total)) {
        throw_global_shape_overflow(components, layout, d);
      }
    }
    shape[d] = total;
  }
  return shape;
}

// Why host data may not enter or leave a captured step (train/capture/function.h).
constexpr const char* kHostReadReason =
    "it reads tensor values on the host, which a replay would not read again; return the "
    "DTensor from the step and read it outside";
constexpr const char* kHostDataReason =
    "its host data would be frozen into the trace; pass the DTensor to the step as an argument";

}  // namespace

DTensor pack(std::vector<Tensor> components, const Layout& layout) {
  Shape shape = infer_global_shape(components, layout);
  return pack(std::move(components), layout, shape);
}

DTensor pack(std::vector<Tensor> components, const Layout& layout, const Shape& global_shape) {
  reject_in_trace("pack", kHostDataReason);
  if (components.empty() && layout.mesh().num_local_devices() > 0) {
    throw_error<InvalidArgumentError>("pack", "no components for the {} local devices of mesh {}",
                                      layout.mesh().num_local_devices(),
                                      layout.mesh().dims_string());
  }
  for (const Tensor& c : components) {
    if (c.rank() != layout.rank()) {
      throw_error<ShapeError>("pack", "component shape {} has rank {}, layout {} has rank {}",
                              shape_to_string(c.shape()), c.rank(), layout.short_string(),
                              layout.rank());
    }
  }
  DType dtype = components[0].dtype();
  return DTensor(global_shape, dtype, layout, std::move(components));
}

std::vector<Tensor> unpack(const DTensor& tensor) {
  reject_in_trace("unpack", kHostReadReason);
  return tensor.shards();
}

DTensor distribute(const Tensor& global, const Layout& layout) {
  reject_in_trace("distribute", kHostDataReason);
  layout.check_shape(global.shape(), "distribute");
  const Mesh& mesh = layout.mesh();
  if (global.device().type != mesh.device_type()) {
    throw_error<InvalidArgumentError>("distribute", "tensor {} is on {}, the mesh has {} devices",
                                      global.to_string(), device_to_string(global.device()),
                                      device_type_name(mesh.device_type()));
  }
  // The value without partial dims first; partial dims are then a local transition.
  Layout full = layout.without_partial();
  std::map<std::vector<int64_t>, Tensor> boxes;  // shard offset -> shared buffer
  std::vector<Tensor> shards;
  for (int64_t id : mesh.local_device_ids()) {
    const Device device = mesh_device(mesh, id);
    std::vector<int64_t> offset = full.shard_offset(global.shape(), id);
    auto it = boxes.find(offset);
    // Replicated boxes share one buffer within a memory space (every CPU device); a device in
    // another space gets its own copy.
    if (it == boxes.end() || !same_memory_space(it->second.device(), device)) {
      Shape extent = full.shard_shape(global.shape(), id);
      Tensor box;
      if (same_memory_space(global.device(), device)) {
        box = extent == global.shape() ? global : slice_box(global, offset, extent);
      } else {
        box = Tensor::empty(extent, global.dtype(), device);
        copy_box(global, offset, box, std::vector<int64_t>(extent.size(), 0), extent);
      }
      it = boxes.insert_or_assign(offset, box).first;
    }
    shards.push_back(it->second.with_device(device));
  }
  DTensor value =
      DTensor::from_trusted_shards(global.shape(), global.dtype(), full, std::move(shards));
  return layout.is_partial() ? relayout(value, layout) : value;
}

void DTensor::throw_bad_shard_index(int64_t local_index) const {
  throw_error<InvalidArgumentError>("DTensor::shard",
                                    "local index {} is out of range: {} has {} local shards",
                                    local_index, to_string(), shards_.size());
}

Tensor to_global(const DTensor& tensor) {
  reject_in_trace("to_global", kHostReadReason);
  const Mesh& mesh = tensor.mesh();
  const Layout& layout = tensor.layout();
  if (mesh.num_processes() > 1) {
    return relayout(tensor, Layout::replicated(mesh, tensor.rank())).shard(0).clone();
  }
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), mesh_device(mesh, 0));
  const MeshDimMask replicated = layout.replicated_mask();
  // One device per box: coordinate 0 along every replicated mesh dim and every partial dim; the
  // other devices of its partial group hold the remaining terms.
  for (const auto& group : mesh.groups(layout.partial_mask())) {
    const int64_t id = group[0];
    bool first_replica = true;
    for (int64_t m = 0; m < mesh.rank(); ++m) {
      if ((replicated >> m) & 1u) first_replica = first_replica && mesh.coord(id, m) == 0;
    }
    if (!first_replica) continue;
    Tensor value = tensor.shard(mesh.local_index(id));
    if (group.size() > 1) {
      // All partial dims of a layout share one op; the pairwise order gives the bits an
      // all-reduce gives.
      std::vector<Tensor> terms;
      for (int64_t member : group) terms.push_back(tensor.shard(mesh.local_index(member)));
      value = reduce_tensors(terms, layout.partial()[0].op);
    }
    std::vector<int64_t> zero(static_cast<size_t>(tensor.rank()), 0);
    copy_box(value, zero, out, layout.shard_offset(tensor.shape(), id), value.shape());
  }
  return out;
}

}  // namespace dtensor
