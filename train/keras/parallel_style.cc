#include "train/keras/parallel_style.h"

#include <vector>

#include "fmt/format.h"
#include "runtime/error.h"

namespace dtensor::keras {

Placement Replicate() { return Placement(Placement::Kind::kReplicate, 0); }
Placement Shard(int64_t dim) { return Placement(Placement::Kind::kShard, dim); }
Placement Partial() { return Placement(Placement::Kind::kPartial, 0); }

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::kReplicate:
      return "Replicate()";
    case Kind::kShard:
      return fmt::format("Shard({})", dim_);
    case Kind::kPartial:
      return "Partial()";
  }
  return "?";
}

Placement Placement::resolved(int64_t rank, const std::string& function,
                              const std::string& what) const {
  if (kind_ != Kind::kShard) return *this;
  const int64_t d = dim_ < 0 ? dim_ + rank : dim_;
  if (d < 0 || d >= rank) {
    throw_error<ShapeError>(function, "{}: {} is outside a rank-{} tensor", what, to_string(),
                            rank);
  }
  return Shard(d);
}

Placement placement_of(const Layout& layout, const std::string& mesh_dim) {
  for (const PartialDim& p : layout.partial()) {
    if (p.mesh_dim == mesh_dim) return Partial();
  }
  const std::vector<std::string>& specs = layout.sharding_specs();
  for (size_t d = 0; d < specs.size(); ++d) {
    if (specs[d] == mesh_dim) return Shard(static_cast<int64_t>(d));
  }
  return Replicate();
}

Layout with_placement(const Layout& layout, const std::string& mesh_dim, const Placement& placement,
                      const std::string& function, const std::string& what) {
  std::vector<std::string> specs = layout.sharding_specs();
  for (std::string& s : specs) {
    if (s == mesh_dim) s = Layout::kUnsharded;
  }
  std::vector<PartialDim> partial;
  for (const PartialDim& p : layout.partial()) {
    if (p.mesh_dim != mesh_dim) partial.push_back(p);
  }
  if (placement.kind() == Placement::Kind::kShard) {
    std::string& spec = specs[static_cast<size_t>(placement.dim())];
    if (spec != Layout::kUnsharded) {
      throw_error<ShapeError>(function, "{}: {} over '{}' needs dim {} of {}, sharded over '{}'",
                              what, placement.to_string(), mesh_dim, placement.dim(),
                              layout.short_string(), spec);
    }
    spec = mesh_dim;
  }
  if (placement.kind() == Placement::Kind::kPartial) partial.push_back({mesh_dim, ReduceOp::kSum});
  // Layout keeps partial dims in mesh-dim order.
  std::vector<PartialDim> ordered;
  for (const MeshDim& m : layout.mesh().dims()) {
    for (const PartialDim& p : partial) {
      if (p.mesh_dim == m.name) ordered.push_back(p);
    }
  }
  return Layout(specs, layout.mesh(), ordered);
}

const char* ParallelStyle::name() const {
  switch (kind_) {
    case Kind::kColwise:
      return "ColwiseParallel";
    case Kind::kRowwise:
      return "RowwiseParallel";
    case Kind::kSequence:
      return "SequenceParallel";
  }
  return "?";
}

std::string ParallelStyle::to_string() const {
  std::vector<std::string> set;
  if (options_.mesh_dim != "model") set.push_back("mesh_dim=" + options_.mesh_dim);
  if (options_.input_layouts) set.push_back("input_layouts=" + options_.input_layouts->to_string());
  if (options_.output_layouts) {
    set.push_back("output_layouts=" + options_.output_layouts->to_string());
  }
  return fmt::format("{}({})", name(), fmt::join(set, ", "));
}

ParallelStyle ParallelStyle::over(std::string mesh_dim) const {
  ParallelStyle copy = *this;
  copy.options_.mesh_dim = std::move(mesh_dim);
  return copy;
}

ParallelStyle ParallelStyle::input_layouts(Placement placement) const {
  ParallelStyle copy = *this;
  copy.options_.input_layouts = placement;
  return copy;
}

ParallelStyle ParallelStyle::output_layouts(Placement placement) const {
  ParallelStyle copy = *this;
  copy.options_.output_layouts = placement;
  return copy;
}

Placement ParallelStyle::compute_input() const {
  switch (kind_) {
    case Kind::kColwise:
      return Replicate();
    case Kind::kRowwise:
      return Shard(-1);
    case Kind::kSequence:
      return Shard(1);
  }
  return Replicate();
}

Placement ParallelStyle::output() const {
  if (options_.output_layouts) return *options_.output_layouts;
  switch (kind_) {
    case Kind::kColwise:
      return Shard(-1);
    case Kind::kRowwise:
      return Replicate();
    case Kind::kSequence:
      return Shard(1);
  }
  return Replicate();
}

}  // namespace dtensor::keras
