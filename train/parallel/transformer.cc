#include "train/parallel/transformer.h"

#include <array>
#include <cmath>
#include <optional>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "fmt/format.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "runtime/error.h"

namespace dtensor::parallel {

namespace {

// A block's weights in the order they are used; norms are 0 and 5, the rest are matmuls.
template <typename B>
auto block_weights(B& b) {
  return std::array{&b.norm1, &b.wq, &b.wk, &b.wv, &b.wo, &b.norm2, &b.w1, &b.w2};
}
constexpr size_t kMatmulsPerBlock = 6;
bool is_norm(size_t k) { return k == 0 || k == 5; }

int64_t hidden_of(const TransformerConfig& c) { return c.hidden > 0 ? c.hidden : 4 * c.dim; }

void check_config(const TransformerConfig& c) {
  const bool sizes = c.vocab >= 1 && c.dim >= 1 && c.heads >= 1 && c.layers >= 1 && c.hidden >= 0;
  if (!sizes || c.dim % c.heads != 0 || (c.dim / c.heads) % 2 != 0 || !(c.dropout >= 0) ||
      !(c.dropout < 1)) {
    throw_error<InvalidArgumentError>(
        "TransformerLM",
        "config {} needs sizes >= 1, dim divisible by heads into an even head size and a dropout "
        "rate in [0, 1)",
        c.to_string());
  }
}

// Initial values: N(0, 0.02) weights (GPT-2's), a fixed stream per weight whatever the mesh.
class Init {
 public:
  Init(const Mesh& mesh, uint64_t seed) : mesh_(mesh), seed_(seed) {}
  Weight normal(const Shape& shape, std::string name, Split split, double stddev = 0.02) {
    const uint64_t stream = seed_ * 1000003u + next_++;
    return Weight(
        random_normal(shape, Layout::replicated(mesh_, static_cast<int64_t>(shape.size())), stream,
                      0.0, stddev),
        std::move(name), split);
  }
  Weight ones(int64_t n, std::string name) {
    ++next_;
    return Weight(dtensor::ones({n}, Layout::replicated(mesh_, 1)), std::move(name), Split::kNone);
  }

 private:
  Mesh mesh_;
  uint64_t seed_;
  uint64_t next_ = 0;
};

}  // namespace

std::string TransformerConfig::to_string() const {
  return fmt::format("layers={} dim={} heads={} hidden={} vocab={} dropout={}{}", layers, dim,
                     heads, hidden_of(*this), vocab, dropout,
                     fused_attention ? " fused_attention" : "");
}

// ---- Weight ----------------------------------------------------------------------------------

Weight::Weight(DTensor initial, std::string name, Split split)
    : var_(initial, std::move(name)), split_(split), compute_(initial.layout()) {}

void Weight::place(const ParallelPlan& plan, const Mesh& mesh) {
  const int64_t rank = var_.shape().size();
  compute_ = compute_layout(plan, mesh, rank, split_);
  var_ = DVariable(relayout(var_.value(), stored_layout(plan, mesh, rank, split_)), var_.name());
}

DTensor Weight::use() const {
  DTensor v = var_.value();
  return v.layout() == compute_ ? v : traced_relayout(v, compute_);
}

// ---- TransformerLM ---------------------------------------------------------------------------

TransformerLM::TransformerLM(const TransformerConfig& config, const Mesh& mesh)
    : config_((check_config(config), config)),
      mesh_(mesh),
      embedding_(
          Init(mesh, config.seed).normal({config.vocab, config.dim}, "embedding", Split::kInput)),
      norm_(Init(mesh, config.seed).ones(config.dim, "norm")),
      head_(Init(mesh, config.seed + 1).normal({config.dim, config.vocab}, "head", Split::kOutput)),
      seeds_(mesh, static_cast<int64_t>(config.seed % (1u << 20)) * 4096 + 17, "dropout_seed") {
  const int64_t d = config.dim, h = hidden_of(config);
  // Out-projections scaled by 1/sqrt(2 * layers) (GPT-2's residual scaling).
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  for (int64_t i = 0; i < config.layers; ++i) {
    Init init(mesh, config.seed + 2 + static_cast<uint64_t>(i));
    const std::string p = "block" + std::to_string(i) + "/";
    Weight norm1 = init.ones(d, p + "norm1");
    Weight wq = init.normal({d, d}, p + "wq", Split::kOutput);
    Weight wk = init.normal({d, d}, p + "wk", Split::kOutput);
    Weight wv = init.normal({d, d}, p + "wv", Split::kOutput);
    Weight wo = init.normal({d, d}, p + "wo", Split::kInput, out_std);
    Weight norm2 = init.ones(d, p + "norm2");
    Weight w1 = init.normal({d, h}, p + "w1", Split::kOutput);
    Weight w2 = init.normal({h, d}, p + "w2", Split::kInput, out_std);
    blocks_.push_back({norm1, wq, wk, wv, wo, norm2, w1, w2});
  }
}

void TransformerLM::parallelize(const ParallelPlan& plan) {
  plan.validate(mesh_, "TransformerLM::parallelize");
  plan_ = plan;
  embedding_.place(plan, mesh_);
  block_of_.clear();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const auto weights = block_weights(blocks_[i]);
    for (size_t k = 0; k < weights.size(); ++k) {
      weights[k]->place(plan, mesh_);
      block_of_[weights[k]] = {i, k};
    }
  }
  norm_.place(plan, mesh_);
  head_.place(plan, mesh_);
  gathers_.reset();
  if (plan.prefetch) gathers_ = std::make_unique<GatherThread>(mesh_);
}

std::vector<DVariable> TransformerLM::variables() const {
  std::vector<DVariable> out = {embedding_.variable()};
  for (const Block& b : blocks_) {
    for (const Weight* w : block_weights(b)) out.push_back(w->variable());
  }
  out.push_back(norm_.variable());
  out.push_back(head_.variable());
  return out;
}

// w in its compute layout: prefetched for the block computing now, or gathered here (fsdp), the
// copy noted by the meter.
DTensor TransformerLM::use(const Weight& w) {
  if (auto it = gathered_.find(&w); it != gathered_.end()) {
    DTensor v = std::move(it->second);
    gathered_.erase(it);
    return v;
  }
  DTensor v = w.use();
  if (!(v.layout() == w.variable().layout())) meter_.gathered(v);
  return v;
}

// x @ w. With reshard_after_forward the gathered weight is not kept for backward: the product
// runs unrecorded and records a VJP of its own that gathers the weight again, then takes
// matmul's VJP (and the gather's: the weight's gradient reduce-scattered to its stored layout),
// op for op, so the bits are those of the plain path.
DTensor TransformerLM::times(const DTensor& x, const Weight& w) {
  const DTensor stored = w.variable().value();
  if (!plan_.reshard_after_forward || stored.layout() == w.used_layout()) {
    return matmul(x, use(w));
  }
  DTensor y = [&] {
    NoRecord pause;
    return matmul(x, use(w));
  }();
  if (!tape_active()) return y;
  record_op({&x, &stored}, y, [this, x, stored, wp = &w](const DTensor& g) {
    auto in_block = block_of_.find(wp);
    const bool prefetched = gathers_ != nullptr && in_block != block_of_.end();
    const DTensor full = prefetched ? backward_weight(in_block->second.first, *wp) : [&] {
      DTensor copy = relayout(stored, wp->used_layout());
      meter_.gathered(copy);
      return copy;
    }();
    std::vector<std::optional<DTensor>> grads(2);
    if (gradient_needed(0)) grads[0] = matmul(g, full, false, true);
    DTensor gw = matmul(x, g, true, false);
    if (gw.rank() > 2) {
      std::vector<int64_t> batch_axes(static_cast<size_t>(gw.rank() - 2));
      for (size_t a = 0; a < batch_axes.size(); ++a) {
        batch_axes[a] = static_cast<int64_t>(a);
      }
      gw = reshape(reduce_sum(gw, batch_axes, true), full.shape());
    }
    grads[1] = relayout(gw, stored.layout());
    if (prefetched) {
      const size_t i = in_block->second.first;
      if (++backward_taken_[i] == static_cast<int>(kMatmulsPerBlock)) {
        mark_compute(timeline_, fmt::format("block{} backward", i), false);
        backward_flights_[i] = {};
      }
    }
    return grads;
  });
  return y;
}

GatherFlight TransformerLM::start_block(size_t i, bool backward) {
  std::vector<DTensor> stored;
  std::vector<Layout> compute;
  const auto weights = block_weights(blocks_[i]);
  for (size_t k = 0; k < weights.size(); ++k) {
    if (backward && is_norm(k)) continue;  // not resharded: kept from forward
    stored.push_back(weights[k]->variable().value());
    compute.push_back(weights[k]->used_layout());
  }
  return start_gathers(*gathers_, stored, compute,
                       fmt::format("block{} gather ({})", i, backward ? "backward" : "forward"),
                       {&timeline_, &meter_});
}

void TransformerLM::take_block(size_t i) {
  const auto weights = block_weights(blocks_[i]);
  for (size_t k = 0; k < weights.size(); ++k) {
    // A matmul weight resharded after forward is not kept for backward: times() records its
    // own VJP, which gathers it again.
    std::optional<NoRecord> pause;
    if (!is_norm(k) && plan_.reshard_after_forward) pause.emplace();
    gathered_.insert_or_assign(weights[k], forward_flights_[i].take(k));
  }
  forward_flights_[i] = {};
}

DTensor TransformerLM::backward_weight(size_t i, const Weight& w) {
  if (backward_taken_[i] == 0) {
    mark_compute(timeline_, fmt::format("block{} backward", i), true);
    if (!backward_flights_[i].started()) backward_flights_[i] = start_block(i, true);
    if (i > 0) backward_flights_[i - 1] = start_block(i - 1, true);
  }
  const size_t k = block_of_.at(&w).second;
  return backward_flights_[i].take(k - (k > 0 ? 1 : 0) - (k > 5 ? 1 : 0));
}

// x (any layout) brought to the colwise input layout, times w [in, out] split on out.
DTensor TransformerLM::colwise(const Weight& w, const DTensor& x) {
  DTensor in = traced_relayout(x, colwise_input_layout(plan_, mesh_));
  return traced_relayout(times(in, w), colwise_output_layout(plan_, mesh_));
}

// x (colwise output layout) times w [in, out] split on in: a partial sum over model, reduced
// (or reduce-scattered along the sequence) into the residual layout.
DTensor TransformerLM::rowwise(const Weight& w, const DTensor& x) {
  DTensor in = traced_relayout(x, colwise_output_layout(plan_, mesh_));
  return traced_relayout(times(in, w), residual_layout(plan_, mesh_));
}

DTensor TransformerLM::residual_dropout(const DTensor& x, bool training) {
  if (!training || config_.dropout == 0) return x;
  return dropout(x, config_.dropout, seeds_.next());
}

DTensor TransformerLM::attention(const Block& b, const DTensor& x) {
  const int64_t batch = x.shape()[0], seq = x.shape()[1], heads = config_.heads;
  const int64_t head_dim = config_.dim / heads;
  // [B, T, D] -> [B, H, T, Dh]: heads over model, as D was.
  auto split_heads = [&](const DTensor& t) {
    return transpose(reshape(t, {batch, seq, heads, head_dim}), {0, 2, 1, 3});
  };
  // Gathered (sequence parallel over model) once for the three projections.
  const DTensor in = traced_relayout(x, colwise_input_layout(plan_, mesh_));
  DTensor q = rotary_embedding(split_heads(colwise(b.wq, in)), config_.rope_base);
  DTensor k = rotary_embedding(split_heads(colwise(b.wk, in)), config_.rope_base);
  DTensor v = split_heads(colwise(b.wv, in));
  DTensor a = config_.fused_attention ? fused_attention(q, k, v, /*causal=*/true)
                                      : scaled_dot_product_attention(q, k, v, /*causal=*/true);
  return rowwise(b.wo, reshape(transpose(a, {0, 2, 1, 3}), {batch, seq, config_.dim}));
}

DTensor TransformerLM::mlp(const Block& b, const DTensor& x) {
  return rowwise(b.w2, gelu(colwise(b.w1, x)));
}

DTensor TransformerLM::call(const DTensor& tokens, bool training) {
  if (tokens.rank() != 2) {
    throw_error<ShapeError>("TransformerLM::call", "tokens {} must be [batch, seq] integers",
                            tokens.short_string());
  }
  const Layout residual = residual_layout(plan_, mesh_);
  std::vector<std::string> token_specs = colwise_input_layout(plan_, mesh_).sharding_specs();
  token_specs.pop_back();
  DTensor ids = traced_relayout(tokens, Layout(token_specs, mesh_));
  const size_t layers = blocks_.size();
  if (gathers_ != nullptr) {
    forward_flights_.assign(layers, {});
    backward_flights_.assign(layers, {});
    backward_taken_.assign(layers, 0);
    gathered_.clear();
    forward_flights_[0] = start_block(0, false);
  }
  DTensor x = traced_relayout(embedding(use(embedding_), ids), residual);
  for (size_t i = 0; i < layers; ++i) {
    const Block& b = blocks_[i];
    if (gathers_ != nullptr) {
      if (i + 1 < layers) forward_flights_[i + 1] = start_block(i + 1, false);
      take_block(i);
    }
    const std::string span = fmt::format("block{} forward", i);
    mark_compute(timeline_, span, true);
    x = add(x, residual_dropout(attention(b, rms_norm(x, use(b.norm1), config_.eps)), training));
    x = add(x, residual_dropout(mlp(b, rms_norm(x, use(b.norm2), config_.eps)), training));
    mark_compute(timeline_, span, false);
  }
  return colwise(head_, rms_norm(x, use(norm_), config_.eps));
}

keras::Loss lm_loss() {
  return [](const DTensor& labels, const DTensor& logits) {
    return reduce_mean(sparse_softmax_cross_entropy(logits, labels), {1});
  };
}

}  // namespace dtensor::parallel
