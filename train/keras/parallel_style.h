// Parallel styles: how one layer is split over one mesh dim (PyTorch's ColwiseParallel,
// RowwiseParallel and SequenceParallel, written as layouts). train/keras/parallelize.h applies
// them to a model's layers by name.
//
// A style touches one mesh dim (`mesh_dim`, "model" unless set) and leaves every other one as it
// finds it: a batch sharded over "data" stays sharded, a weight stays replicated over "data". On
// its dim it decides three things, each a Placement (Replicate, Shard(d) or Partial):
//
//   style              variables                 computes on         output (default)
//   ColwiseParallel    kernel [in, out]: Shard(1) input Replicate    Shard(-1): no communication
//                      bias [out]: Shard(0)
//   RowwiseParallel    kernel [in, out]: Shard(0) input Shard(-1)    Replicate: the partial sum
//                      bias: replicated, added after the sum           all-reduced
//   SequenceParallel   replicated                input Shard(1)      Shard(1)
//
// (A Dense's kernel and bias; an Embedding's table splits as a kernel [vocab, features] does,
// its ids read whole; LayerNormalization and Dropout take SequenceParallel.)
//
// The input is relayouted to what the layer computes on; the output from what it computes to
// `output_layouts` (Colwise with Replicate all-gathers; Rowwise with Shard(1) reduce-scatters
// along the sequence; Rowwise with Partial leaves the sum pending for its consumer). Unlike
// PyTorch's local tensors, a DTensor carries its layout: `input_layouts`, when set, is not an
// assumption but a check (the layer's input must arrive so, or call() throws), which is how a plan
// states that a norm before it is sequence parallel. There is no use_local_output: outputs are
// DTensors; an output layout says where they go.
//
// Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "layout/layout.h"

namespace dtensor::keras {

// Where a tensor lives along one mesh dim.
class Placement {
 public:
  enum class Kind { kReplicate, kShard, kPartial };

  Kind kind() const { return kind_; }
  // The tensor dim of a Shard (may be negative: from the end).
  int64_t dim() const { return dim_; }
  // "Replicate()", "Shard(-1)", "Partial()".
  std::string to_string() const;

  // Shard(d) with d resolved against `rank` (ShapeError naming `function` and `what` when out of
  // range); other kinds as they are.
  Placement resolved(int64_t rank, const std::string& function, const std::string& what) const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind_ == b.kind_ && a.dim_ == b.dim_;
  }
  friend bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }

 private:
  friend Placement Replicate();
  friend Placement Shard(int64_t dim);
  friend Placement Partial();
  Placement(Kind kind, int64_t dim) : kind_(kind), dim_(dim) {}
  Kind kind_;
  int64_t dim_;
};

Placement Replicate();
Placement Shard(int64_t dim);
Placement Partial();

// The placement of `layout` along `mesh_dim` (Shard with a dim >= 0).
Placement placement_of(const Layout& layout, const std::string& mesh_dim);
// `layout` with `mesh_dim` moved to `placement` (resolved: Shard's dim >= 0), the other mesh dims
// kept. ShapeError naming `function` and `what` when the tensor dim is sharded over another mesh
// dim already.
Layout with_placement(const Layout& layout, const std::string& mesh_dim, const Placement& placement,
                      const std::string& function, const std::string& what);

struct StyleOptions {
  std::string mesh_dim = "model";
  std::optional<Placement> input_layouts;   // checked at call() when set
  std::optional<Placement> output_layouts;  // the style's default when unset
};

class ParallelStyle {
 public:
  enum class Kind { kColwise, kRowwise, kSequence };

  Kind kind() const { return kind_; }
  const StyleOptions& options() const { return options_; }
  const std::string& mesh_dim() const { return options_.mesh_dim; }
  // "ColwiseParallel", "RowwiseParallel", "SequenceParallel".
  const char* name() const;
  // The name with the options that are set: "RowwiseParallel(output_layouts=Shard(1))",
  // "ColwiseParallel(mesh_dim=tp)".
  std::string to_string() const;

  // Copies with an option set: ColwiseParallel().input_layouts(Shard(1)),
  // RowwiseParallel().output_layouts(Shard(1)), ColwiseParallel().over("tp").
  ParallelStyle over(std::string mesh_dim) const;
  ParallelStyle input_layouts(Placement placement) const;
  ParallelStyle output_layouts(Placement placement) const;

  // What the layer computes on, and where its output goes (output_layouts or the default).
  Placement compute_input() const;
  Placement output() const;

 protected:
  ParallelStyle(Kind kind, StyleOptions options) : kind_(kind), options_(std::move(options)) {}

 private:
  Kind kind_;
  StyleOptions options_;
};

struct ColwiseParallel : ParallelStyle {
  ColwiseParallel() : ParallelStyle(Kind::kColwise, {}) {}
};
struct RowwiseParallel : ParallelStyle {
  RowwiseParallel() : ParallelStyle(Kind::kRowwise, {}) {}
};
struct SequenceParallel : ParallelStyle {
  SequenceParallel() : ParallelStyle(Kind::kSequence, {}) {}
};

}  // namespace dtensor::keras
