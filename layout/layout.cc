#include "layout/layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace dtensor {

namespace {

constexpr std::string_view kSpecsPrefix = "sharding_specs:";
constexpr std::string_view kPartialSep = ", partial:";
constexpr std::string_view kMeshSep = ", mesh:";

std::vector<std::string> split_specs(std::string_view text) {
  std::vector<std::string> specs;
  if (text.empty()) return specs;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(',', start);
    specs.emplace_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return specs;
    start = pos + 1;
  }
}

ReduceOp parse_reduce_op(std::string_view name, std::string_view whole) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    if (reduce_op_name(op) == name) return op;
  }
  throw_error<LayoutError>("Layout::from_string", "unknown reduce op '{}' in '{}'", name, whole);
}

}  // namespace

Layout::Layout(std::vector<std::string> sharding_specs, Mesh mesh, std::vector<PartialDim> partial)
    : mesh_(std::move(mesh)), specs_(std::move(sharding_specs)), partial_(std::move(partial)) {
  mesh_dim_of_.assign(specs_.size(), -1);
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i] == kUnsharded) continue;
    int64_t m = mesh_.dim_index(specs_[i]);
    if (m < 0) {
      throw_error<LayoutError>("Layout",
                               "sharding spec '{}' of tensor dim {} is not a dim of mesh {}",
                               specs_[i], i, mesh_.dims_string());
    }
    MeshDimMask bit = MeshDimMask{1} << m;
    if (sharded_mask_ & bit) {
      throw_error<LayoutError>("Layout", "mesh dim '{}' shards more than one tensor dim in [{}]",
                               specs_[i], fmt::join(specs_, ","));
    }
    sharded_mask_ |= bit;
    mesh_dim_of_[i] = m;
  }
  for (const PartialDim& p : partial_) {
    int64_t m = mesh_.dim_index(p.mesh_dim);
    if (m < 0) {
      throw_error<LayoutError>("Layout", "partial dim '{}' is not a dim of mesh {}", p.mesh_dim,
                               mesh_.dims_string());
    }
    MeshDimMask bit = MeshDimMask{1} << m;
    if (sharded_mask_ & bit) {
      throw_error<LayoutError>("Layout", "mesh dim '{}' is both sharded and partial in [{}]",
                               p.mesh_dim, fmt::join(specs_, ","));
    }
    if (partial_mask_ & bit) {
      throw_error<LayoutError>("Layout", "partial dim '{}' is listed twice", p.mesh_dim);
    }
    if (p.op != partial_.front().op) {
      // Mixed ops would make the value depend on the order the terms are reduced in.
      throw_error<LayoutError>("Layout",
                               "partial dims mix {}({}) and {}({}); all must share one op",
                               reduce_op_name(partial_.front().op), partial_.front().mesh_dim,
                               reduce_op_name(p.op), p.mesh_dim);
    }
    partial_mask_ |= bit;
  }
  std::sort(partial_.begin(), partial_.end(), [this](const PartialDim& a, const PartialDim& b) {
    return mesh_.dim_index(a.mesh_dim) < mesh_.dim_index(b.mesh_dim);
  });
}

Layout Layout::replicated(const Mesh& mesh, int64_t rank) {
  if (rank < 0) throw_error<LayoutError>("Layout::replicated", "negative rank {}", rank);
  return Layout(std::vector<std::string>(static_cast<size_t>(rank), kUnsharded), mesh);
}

Layout Layout::batch_sharded(const Mesh& mesh, const std::string& mesh_dim, int64_t rank,
                             int64_t axis) {
  if (axis < 0 || axis >= rank) {
    throw_error<LayoutError>("Layout::batch_sharded", "axis {} out of range for rank {}", axis,
                             rank);
  }
  std::vector<std::string> specs(static_cast<size_t>(rank), kUnsharded);
  specs[axis] = mesh_dim;
  return Layout(std::move(specs), mesh);
}

Layout Layout::inner_sharded(const Mesh& mesh, const std::string& mesh_dim, int64_t rank) {
  if (rank < 1) throw_error<LayoutError>("Layout::inner_sharded", "rank {} has no inner dim", rank);
  return batch_sharded(mesh, mesh_dim, rank, rank - 1);
}

Layout Layout::from_string(std::string_view text) {
  if (text.substr(0, kSpecsPrefix.size()) != kSpecsPrefix) {
    throw_error<LayoutError>("Layout::from_string", "layout string '{}' does not start with '{}'",
                             text, kSpecsPrefix);
  }
  size_t mesh_pos = text.find(kMeshSep);
  if (mesh_pos == std::string_view::npos) {
    throw_error<LayoutError>("Layout::from_string", "layout string '{}' has no '{}' part", text,
                             kMeshSep.substr(2));
  }
  std::string_view head = text.substr(kSpecsPrefix.size(), mesh_pos - kSpecsPrefix.size());
  Mesh mesh = Mesh::from_string(text.substr(mesh_pos + kMeshSep.size()));
  std::vector<PartialDim> partial;
  size_t partial_pos = head.find(kPartialSep);
  if (partial_pos != std::string_view::npos) {
    for (const std::string& entry : split_specs(head.substr(partial_pos + kPartialSep.size()))) {
      size_t open = entry.find('(');
      if (open == std::string::npos || entry.back() != ')' || open + 2 > entry.size()) {
        throw_error<LayoutError>("Layout::from_string",
                                 "bad partial entry '{}' in '{}' (expected op(mesh_dim))", entry,
                                 text);
      }
      partial.push_back({entry.substr(open + 1, entry.size() - open - 2),
                         parse_reduce_op(std::string_view(entry).substr(0, open), text)});
    }
    head = head.substr(0, partial_pos);
  }
  return Layout(split_specs(head), std::move(mesh), std::move(partial));
}

int64_t Layout::tensor_dim_of(int64_t mesh_dim) const {
  if (mesh_dim < 0 || mesh_dim >= mesh_.rank()) {
    throw_error<LayoutError>("Layout::tensor_dim_of",
                             "mesh dim index {} is out of range for layout {} on mesh {} (rank {})",
                             mesh_dim, short_string(), mesh_.dims_string(), mesh_.rank());
  }
  for (size_t i = 0; i < mesh_dim_of_.size(); ++i) {
    if (mesh_dim_of_[i] == mesh_dim) return static_cast<int64_t>(i);
  }
  return -1;
}

void Layout::throw_dim_out_of_range(int64_t dim, const char* function) const {
  throw_error<LayoutError>(function, "tensor dim {} is out of range for layout {} (rank {})", dim,
                           short_string(), rank());
}

void Layout::check_device(int64_t device_id, const char* function) const {
  if (device_id < 0 || device_id >= mesh_.num_devices()) {
    throw_error<LayoutError>(function, "device id {} is out of range for mesh {} ({} devices)",
                             device_id, mesh_.dims_string(), mesh_.num_devices());
  }
}

int64_t Layout::num_shards(int64_t dim) const {
  check_dim(dim, "Layout::num_shards");
  const int64_t m = mesh_dim_of_[static_cast<size_t>(dim)];
  return m < 0 ? 1 : mesh_.dims()[m].size;
}

std::vector<int64_t> Layout::num_shards_per_dim() const {
  std::vector<int64_t> n(specs_.size());
  for (size_t i = 0; i < n.size(); ++i) n[i] = num_shards(static_cast<int64_t>(i));
  return n;
}

MeshDimMask Layout::replicated_mask() const {
  MeshDimMask all = static_cast<MeshDimMask>((uint64_t{1} << mesh_.rank()) - 1);
  return all & ~sharded_mask_ & ~partial_mask_;
}

void Layout::check_shape(const Shape& global_shape, const char* function) const {
  if (static_cast<int64_t>(global_shape.size()) != rank()) {
    throw_error<LayoutError>(function, "shape {} has rank {} but layout {} has rank {}",
                             shape_to_string(global_shape), global_shape.size(), short_string(),
                             rank());
  }
  validate_shape(global_shape, function);
}

ShardRange Layout::shard_range(const Shape& global_shape, int64_t dim, int64_t device_id) const {
  check_shape(global_shape, "Layout::shard_range");
  check_dim(dim, "Layout::shard_range");
  check_device(device_id, "Layout::shard_range");
  return shard_range_unchecked(global_shape, dim, device_id);
}

ShardRange Layout::shard_range_unchecked(const Shape& global_shape, int64_t dim,
                                         int64_t device_id) const {
  int64_t m = mesh_dim_of_[static_cast<size_t>(dim)];
  if (m < 0) return {0, global_shape[dim]};
  return chunk_range(global_shape[dim], mesh_.dims()[m].size, mesh_.coord(device_id, m));
}

Shape Layout::shard_shape(const Shape& global_shape, int64_t device_id) const {
  check_shape(global_shape, "Layout::shard_shape");
  check_device(device_id, "Layout::shard_shape");
  Shape shape(global_shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    shape[i] = shard_range_unchecked(global_shape, static_cast<int64_t>(i), device_id).size;
  }
  return shape;
}

std::vector<int64_t> Layout::shard_offset(const Shape& global_shape, int64_t device_id) const {
  check_shape(global_shape, "Layout::shard_offset");
  check_device(device_id, "Layout::shard_offset");
  std::vector<int64_t> offset(global_shape.size());
  for (size_t i = 0; i < offset.size(); ++i) {
    offset[i] = shard_range_unchecked(global_shape, static_cast<int64_t>(i), device_id).offset;
  }
  return offset;
}

Layout Layout::delete_dims(std::vector<int64_t> dims) const {
  std::vector<bool> drop(specs_.size(), false);
  for (const int64_t given : dims) {
    const int64_t d = given < 0 ? given + rank() : given;
    if (d < 0 || d >= rank()) {
      throw_error<LayoutError>("Layout::delete_dims",
                               "tensor dim {} is out of range for layout {} (rank {})", given,
                               short_string(), rank());
    }
    drop[static_cast<size_t>(d)] = true;
  }
  std::vector<std::string> specs;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!drop[i]) specs.push_back(specs_[i]);
  }
  return Layout(std::move(specs), mesh_, partial_);
}

Layout Layout::with_spec(int64_t dim, std::string spec) const {
  check_dim(dim, "Layout::with_spec");
  std::vector<std::string> specs = specs_;
  specs[static_cast<size_t>(dim)] = std::move(spec);
  return Layout(std::move(specs), mesh_, partial_);
}

Layout Layout::with_partial(std::vector<PartialDim> partial) const {
  return Layout(specs_, mesh_, std::move(partial));
}

Layout Layout::with_mesh(const Mesh& mesh) const { return Layout(specs_, mesh, partial_); }

std::string Layout::short_string() const {
  std::string s = fmt::format("[{}]", fmt::join(specs_, ","));
  for (size_t i = 0; i < partial_.size(); ++i) {
    s += fmt::format("{}{}({})", i == 0 ? " partial:" : ",", reduce_op_name(partial_[i].op),
                     partial_[i].mesh_dim);
  }
  return s;
}

std::string Layout::to_string() const {
  std::string s = fmt::format("sharding_specs:{}", fmt::join(specs_, ","));
  for (size_t i = 0; i < partial_.size(); ++i) {
    s += fmt::format("{}{}({})", i == 0 ? kPartialSep : ",", reduce_op_name(partial_[i].op),
                     partial_[i].mesh_dim);
  }
  return s + fmt::format("{}{}", kMeshSep, mesh_.to_string());
}

bool operator==(const Layout& a, const Layout& b) {
  if (a.mesh_dim_of_ != b.mesh_dim_of_ || a.partial_mask_ != b.partial_mask_ ||
      a.mesh_ != b.mesh_) {
    return false;
  }
  for (size_t i = 0; i < a.partial_.size(); ++i) {
    if (a.partial_[i].op != b.partial_[i].op) return false;
  }
  return true;
}

}  // namespace dtensor
