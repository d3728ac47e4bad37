// Sharding rules for ops: which layouts the inputs must take and which layout the output gets.
//
// Ops are described einsum-style. Every tensor dim carries a *letter*; dims with the same letter
// are the same logical axis (the two M's of an elementwise add, the K of a matmul). Letters
// missing from the output are contracted (summed, or max/min-reduced). A rule assigns each letter
// at most one mesh dim (each mesh dim to at most one letter), then:
//   - every input is relayouted so that its dims are sharded as their letters are;
//   - a contracted letter sharded on mesh dim d makes the output partial over d (the reduction is
//     deferred to whoever consumes the output);
//   - partial-sum inputs pass through when the op is linear in them: an additive op (add, sub)
//     whose inputs are all partial over d; a multilinear op (mul, matmul, scale) where exactly
//     one input on which it is linear is partial over d and the others are replicated over d.
//     Otherwise partial inputs are reduced first.
// Among all assignments the rule picks the one whose relayouts move the fewest bytes (the
// relayout planner's cost model), preferring sharded over replicated work on ties. Results are
// cached by (op, attributes, input layouts and shapes). Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor {

enum class Linearity : uint8_t { kNone, kAdditive, kMultilinear };

struct OperandDims {
  // One letter per tensor dim; kBroadcastDim for a size-1 dim broadcast against a larger one
  // (it must stay unsharded).
  std::vector<int> letters;
  bool linear = false;  // for kMultilinear ops: the op is linear in this operand
};
constexpr int kBroadcastDim = -1;

struct OpSignature {
  // The public op's name ("layer_norm"): errors print it. A string literal (not copied).
  const char* op;
  // What, besides the inputs' ranks, shapes and layouts, fixes the letters below (matmul's
  // transposes, a reduction's axes): with `op` it keys the decision cache, and never appears in
  // errors. Empty for most ops.
  std::string attributes;
  std::vector<OperandDims> operands;
  std::vector<int> output_letters;  // kBroadcastDim: a new output dim, always unsharded
  Linearity linearity = Linearity::kNone;
  ReduceOp contraction = ReduceOp::kSum;  // how contracted letters combine
};

struct ShardingDecision {
  std::vector<Layout> inputs;  // the layout each input must be relayouted to
  Layout output;
};

// The decision for `inputs` (on one mesh) under `signature`; cached.
std::shared_ptr<const ShardingDecision> decide_sharding(const OpSignature& signature,
                                                        const std::vector<const DTensor*>& inputs);

// Throws MeshError naming `op` if the inputs are not all on one mesh.
void check_same_mesh(const char* op, const std::vector<const DTensor*>& inputs);

struct ShardingCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
};
ShardingCacheStats sharding_cache_stats();

}  // namespace dtensor
