// ParallelPlan: which mesh dim carries which kind of parallelism, and the layouts that follow
// (torchtitan's parallelize plan, PyTorch's ColwiseParallel / RowwiseParallel / SequenceParallel
// and fully_shard, written as layouts):
//   - data:  the batch dim of activations is sharded over it (data parallel);
//   - model: tensor parallel (Megatron): a colwise Linear shards its output features, a rowwise
//            one its input features (its output is then a partial sum, reduced or
//            reduce-scattered into the residual layout); heads, vocab and the MLP's hidden dim
//            live sharded over it;
//   - seq:   sequence parallel: the residual stream (norms, dropout, residual adds) is sharded
//            over it along the sequence dim. With seq == model this is Megatron's sequence
//            parallelism: an all-gather before the colwise matmul, a reduce-scatter after the
//            rowwise one. With a mesh dim of its own the sequence stays sharded through the
//            matmuls too (attention gathers its keys and values);
//   - fsdp:  parameters (and so the optimizer slots, which take their layout) are stored sharded
//            over the data dim as well, gathered per layer just before use; the gradient comes
//            back reduce-scattered (the relayout's VJP);
//   - reshard_after_forward (with fsdp): a layer's gathered weights are dropped once its forward
//            is done and gathered again for its backward (FSDP's reshard_after_forward), so that
//            about one layer's gathered weights are alive at a time instead of every layer's
//            until backward: one more all-gather per weight and step, same bits.
//   - prefetch (with fsdp): block i+1's gathers run on a gather thread while block i computes
//            (and, resharding after forward, block i-1's while block i's gradients are
//            computed): train/parallel/prefetch.h. Same collectives, same bits; one more block's
//            gathered weights are alive at a time.
// An empty name leaves that kind off. Every name must be a dim of the mesh the model lives on.
//
// Plain values; thread-safe.
#pragma once

#include <string>

#include "layout/layout.h"

namespace dtensor::parallel {

struct ParallelPlan {
  std::string data, model, seq;
  bool fsdp = false;
  bool reshard_after_forward = false;
  bool prefetch = false;

  // "data=data model=model seq=seq fsdp reshard_after_forward prefetch", the set fields only
  // ("replicated" when none).
  std::string to_string() const;
  // InvalidArgumentError naming `function` when a set name is not a dim of `mesh`, when model
  // and data (or seq and data) name one dim, fsdp is set without data, or reshard_after_forward
  // or prefetch without fsdp.
  void validate(const Mesh& mesh, const char* function) const;
};

// Activation layouts of [batch, seq, features] tensors under `plan` on `mesh`.
// The residual stream: batch over data, sequence over seq.
Layout residual_layout(const ParallelPlan& plan, const Mesh& mesh);
// What a colwise Linear reads: the residual layout with the sequence gathered when seq is the
// model dim (its features are about to be sharded there).
Layout colwise_input_layout(const ParallelPlan& plan, const Mesh& mesh);
// What a colwise Linear gives (and a rowwise one reads): colwise_input_layout's batch and
// sequence, features over model.
Layout colwise_output_layout(const ParallelPlan& plan, const Mesh& mesh);

// How a weight is split over the model dim.
enum class Split { kNone, kOutput, kInput };

// The layout a weight of `rank` (1 or 2; a 2-D weight is [in, out], a 1-D one is [out]) is used
// in: its `split` dim over model. `stored_layout` adds fsdp's data dim on the first dim left
// unsharded (none when every dim is taken).
Layout compute_layout(const ParallelPlan& plan, const Mesh& mesh, int64_t rank, Split split);
Layout stored_layout(const ParallelPlan& plan, const Mesh& mesh, int64_t rank, Split split);

}  // namespace dtensor::parallel
