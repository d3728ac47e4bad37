// TransformerLM: a decoder-only language model (token embedding, pre-norm blocks of causal
// multi-head attention with rotary positions and a GELU MLP, RMSNorm, a linear head) as a Keras
// model (train/keras/model.h), whose parallelism is one call:
//
//   parallel::TransformerLM model(config, mesh);              // everything replicated
//   model.parallelize({.data = "data", .model = "model", .seq = "seq", .fsdp = true});
//   keras::Trainer trainer(model, adam, parallel::lm_loss());
//
// Under a plan (train/parallel/plan.h) the attention's q/k/v and the MLP's first matmul are
// colwise, the attention output and the MLP's second matmul rowwise, the embedding table and the
// head vocab-sharded over `model` (the loss is then computed on vocab-sharded logits), the
// norms, dropout and residual adds run on the residual layout (sequence-sharded over `seq`), and
// with fsdp every weight is stored sharded over `data` and gathered where a layer uses it; with
// prefetch a block's gathers run on a gather thread while the block before it computes (forward)
// and, resharding after forward, while the block after it computes its gradients (backward).
//
// Values do not depend on the plan or the mesh: weights come from counter-based randomness by
// (seed, name), dropout masks by (seed, step, element). Variables are named
// "embedding", "block<i>/{norm1,wq,wk,wv,wo,norm2,w1,w2}", "norm", "head".
//
// Not thread-safe (one trainer calls it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/seed_generator.h"
#include "train/keras/metrics.h"
#include "train/keras/model.h"
#include "train/parallel/gather_meter.h"
#include "train/parallel/plan.h"
#include "train/parallel/prefetch.h"

namespace dtensor::parallel {

struct TransformerConfig {
  int64_t vocab = 96;
  int64_t dim = 256;
  int64_t heads = 8;
  int64_t layers = 4;
  int64_t hidden = 0;  // the MLP's hidden width; 0: 4 * dim
  double dropout = 0.1;
  double rope_base = 10000.0;
  double eps = 1e-6;
  uint64_t seed = 0;
  // Attention through the fused kernel (ops fused_attention): no score matrix, the same bits on
  // every split of batch and heads; the sequence is gathered whole for it (a seq-sharded plan
  // moves more).
  bool fused_attention = false;

  // "layers=4 dim=256 heads=8 hidden=1024 vocab=96 dropout=0.1" (" fused_attention" when set).
  std::string to_string() const;
};

// A weight whose placement follows the plan: stored in stored_layout, used in compute_layout.
class Weight {
 public:
  Weight(DTensor initial, std::string name, Split split);
  // Re-stores the variable in the plan's layout (before an optimizer has slots for it).
  void place(const ParallelPlan& plan, const Mesh& mesh);
  // The value in its compute layout: with fsdp an all-gather over data, whose VJP
  // reduce-scatters the gradient.
  DTensor use() const;
  const DVariable& variable() const { return var_; }
  const Layout& used_layout() const { return compute_; }

 private:
  DVariable var_;
  Split split_;
  Layout compute_;
};

class TransformerLM : public keras::Model {
 public:
  // InvalidArgumentError naming "TransformerLM" for sizes < 1, dim not divisible by heads, an odd
  // head size, or a dropout rate outside [0, 1).
  TransformerLM(const TransformerConfig& config, const Mesh& mesh);

  // Places every weight by `plan` (plan.validate's errors); call before training.
  void parallelize(const ParallelPlan& plan);
  const ParallelPlan& plan() const { return plan_; }
  const TransformerConfig& config() const { return config_; }
  const Mesh& mesh() const { return mesh_; }

  std::vector<DVariable> variables() const override;
  // Logits [batch, seq, vocab] (vocab over model) of integer tokens [batch, seq].
  DTensor call(const DTensor& tokens, bool training) override;
  // The dropout seed stream (checkpoint its state() to resume with the same masks).
  const SeedGenerator& seeds() const { return seeds_; }
  // The weights' gathered copies (fsdp) seen by eager calls: live bytes and their peak.
  GatherMeter& gather_meter() { return meter_; }
  // When each block's gathers (prefetch) and its forward and backward compute began and ended,
  // eager or replayed; off until enabled.
  Timeline& timeline() { return timeline_; }

 private:
  struct Block {
    Weight norm1, wq, wk, wv, wo, norm2, w1, w2;
  };
  DTensor attention(const Block& b, const DTensor& x);
  DTensor mlp(const Block& b, const DTensor& x);
  DTensor use(const Weight& w);
  DTensor times(const DTensor& x, const Weight& w);
  DTensor colwise(const Weight& w, const DTensor& x);
  DTensor rowwise(const Weight& w, const DTensor& x);
  DTensor residual_dropout(const DTensor& x, bool training);
  // Prefetch: starts block i's gathers (its matmul weights only, for backward).
  GatherFlight start_block(size_t i, bool backward);
  // Takes block i's gathered weights for its forward into gathered_.
  void take_block(size_t i);
  // Weight w of block i gathered for its backward: the flight started by the block after it (or
  // now), block i-1's flight started meanwhile.
  DTensor backward_weight(size_t i, const Weight& w);

  TransformerConfig config_;
  Mesh mesh_;
  ParallelPlan plan_;
  Weight embedding_;
  std::vector<Block> blocks_;
  Weight norm_, head_;
  SeedGenerator seeds_;
  GatherMeter meter_;
  Timeline timeline_;
  // Prefetch: the gather thread, each block weight's (block, index in the block), the flights of
  // the step being run and the weights taken for the block computing now.
  std::unique_ptr<GatherThread> gathers_;
  std::map<const Weight*, std::pair<size_t, size_t>> block_of_;
  std::vector<GatherFlight> forward_flights_, backward_flights_;
  std::vector<int> backward_taken_;
  std::map<const Weight*, DTensor> gathered_;
};

// The per-example loss of a language model for keras::Trainer: the mean over the sequence of
// sparse_softmax_cross_entropy(logits, labels), shape [batch].
keras::Loss lm_loss();

}  // namespace dtensor::parallel
