#include "ops/sharding.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "dtensor/relayout.h"

namespace dtensor {
namespace {

struct Candidate {
  std::vector<std::vector<std::string>> specs;    // per input
  std::vector<std::vector<PartialDim>> partials;  // per input, the partial dims kept
  std::vector<std::string> output_specs;
  std::vector<PartialDim> output_partial;
};

class Solver {
 public:
  Solver(const OpSignature& sig, const std::vector<const DTensor*>& inputs)
      : sig_(sig), inputs_(inputs), mesh_(inputs[0]->mesh()) {
    for (const OperandDims& o : sig.operands) {
      for (int l : o.letters) num_letters_ = std::max(num_letters_, l + 1);
    }
    for (int l : sig.output_letters) num_letters_ = std::max(num_letters_, l + 1);
    options_.assign(static_cast<size_t>(num_letters_), {-1});
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Layout& layout = inputs[i]->layout();
      const auto& letters = sig.operands[i].letters;
      for (size_t d = 0; d < letters.size(); ++d) {
        if (letters[d] < 0 || !layout.is_sharded(static_cast<int64_t>(d))) continue;
        auto& opts = options_[static_cast<size_t>(letters[d])];
        int64_t m = layout.mesh_dim_of(static_cast<int64_t>(d));
        if (std::find(opts.begin(), opts.end(), m) == opts.end()) opts.push_back(m);
      }
    }
    contracted_.assign(static_cast<size_t>(num_letters_), true);
    for (int l : sig.output_letters) {
      if (l >= 0) contracted_[static_cast<size_t>(l)] = false;
    }
  }

  ShardingDecision solve() {
    std::vector<int64_t> assignment(static_cast<size_t>(num_letters_), -1);
    search(0, assignment, 0);
    if (!best_) {
      throw_error<InternalError>(sig_.op, "no sharding rule found for the input layouts");
    }
    ShardingDecision out{{}, layout(best_->output_specs, best_->output_partial)};
    for (size_t i = 0; i < inputs_.size(); ++i) {
      out.inputs.push_back(layout(best_->specs[i], best_->partials[i]));
    }
    return out;
  }

 private:
  Layout layout(const std::vector<std::string>& specs, const std::vector<PartialDim>& partial) {
    return Layout(specs, mesh_, partial);
  }

  void search(int letter, std::vector<int64_t>& assignment, MeshDimMask used) {
    if (letter == num_letters_) {
      evaluate(assignment);
      return;
    }
    for (int64_t m : options_[static_cast<size_t>(letter)]) {
      if (m >= 0 && (used >> m) & 1u) continue;
      assignment[static_cast<size_t>(letter)] = m;
      search(letter + 1, assignment, m >= 0 ? used | (MeshDimMask{1} << m) : used);
    }
    assignment[static_cast<size_t>(letter)] = -1;
  }

  // Whether input i may keep its partial sum over mesh dim m.
  bool keeps_partial(size_t i, int64_t m, MeshDimMask assigned) const {
    if ((assigned >> m) & 1u) return false;
    auto partial_sum = [&](size_t j) {
      const Layout& l = inputs_[j]->layout();
      return ((l.partial_mask() >> m) & 1u) && l.partial()[0].op == ReduceOp::kSum;
    };
    if (!partial_sum(i)) return false;
    switch (sig_.linearity) {
      case Linearity::kNone:
        return false;
      case Linearity::kAdditive:
        for (size_t j = 0; j < inputs_.size(); ++j) {
          if (!partial_sum(j)) return false;
        }
        return true;
      case Linearity::kMultilinear:
        if (!sig_.operands[i].linear) return false;
        for (size_t j = 0; j < inputs_.size(); ++j) {
          if (j != i && ((inputs_[j]->layout().partial_mask() >> m) & 1u)) return false;
        }
        return true;
    }
    return false;
  }

  void evaluate(const std::vector<int64_t>& assignment) {
    MeshDimMask assigned = 0;
    int sharded_letters = 0;
    for (int64_t m : assignment) {
      if (m >= 0) {
        assigned |= MeshDimMask{1} << m;
        ++sharded_letters;
      }
    }
    Candidate c;
    double cost = 0;
    MeshDimMask kept = 0;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const DTensor& in = *inputs_[i];
      std::vector<std::string> specs;
      for (int l : sig_.operands[i].letters) {
        int64_t m = l < 0 ? -1 : assignment[static_cast<size_t>(l)];
        specs.push_back(m < 0 ? Layout::kUnsharded : mesh_.dims()[m].name);
      }
      std::vector<PartialDim> partial;
      for (const PartialDim& p : in.layout().partial()) {
        int64_t m = mesh_.dim_index(p.mesh_dim);
        if (keeps_partial(i, m, assigned)) {
          partial.push_back(p);
          kept |= MeshDimMask{1} << m;
        }
      }
      Layout target(specs, mesh_, partial);
      cost += plan_relayout(in.layout(), target, in.shape(), in.dtype())->cost_bytes;
      c.specs.push_back(std::move(specs));
      c.partials.push_back(std::move(partial));
    }
    for (int l : sig_.output_letters) {
      int64_t m = l < 0 ? -1 : assignment[static_cast<size_t>(l)];
      c.output_specs.push_back(m < 0 ? Layout::kUnsharded : mesh_.dims()[m].name);
    }
    for (int64_t m = 0; m < mesh_.rank(); ++m) {
      if ((kept >> m) & 1u) c.output_partial.push_back({mesh_.dims()[m].name, ReduceOp::kSum});
    }
    for (int l = 0; l < num_letters_; ++l) {
      int64_t m = assignment[static_cast<size_t>(l)];
      if (!contracted_[static_cast<size_t>(l)] || m < 0) continue;
      if (kept && sig_.contraction != ReduceOp::kSum) return;  // would mix reduce ops
      c.output_partial.push_back({mesh_.dims()[m].name, sig_.contraction});
    }
    std::sort(c.output_partial.begin(), c.output_partial.end(),
              [&](const PartialDim& a, const PartialDim& b) {
                return mesh_.dim_index(a.mesh_dim) < mesh_.dim_index(b.mesh_dim);
              });
    // Ties go to the assignment that shards more letters: less redundant work per device.
    cost -= 1e-3 * sharded_letters;
    if (!best_ || cost < best_cost_) {
      best_cost_ = cost;
      best_ = std::make_unique<Candidate>(std::move(c));
    }
  }

  const OpSignature& sig_;
  const std::vector<const DTensor*>& inputs_;
  const Mesh& mesh_;
  int num_letters_ = 0;
  std::vector<std::vector<int64_t>> options_;
  std::vector<bool> contracted_;
  std::unique_ptr<Candidate> best_;
  double best_cost_ = std::numeric_limits<double>::infinity();
};

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const ShardingDecision>> decisions;
  int64_t hits = 0;
  int64_t misses = 0;
};

Cache& cache() {
  static Cache c;
  return c;
}

void append(std::string& key, const void* data, size_t n) {
  key.append(static_cast<const char*>(data), n);
}

std::string cache_key(const OpSignature& sig, const std::vector<const DTensor*>& inputs) {
  std::string key = sig.op;
  if (!sig.attributes.empty()) {
    key.push_back(':');  // op names are identifiers, so the split is unambiguous
    key += sig.attributes;
  }
  key.push_back('\0');
  // Not fingerprint(): a decision holds layouts on its mesh, and a process-local mesh shares the
  // fingerprint of the spanning mesh over the same dims.
  uint64_t fp = inputs[0]->mesh().identity_fingerprint();
  append(key, &fp, sizeof(fp));
  for (const DTensor* in : inputs) {
    const Layout& l = in->layout();
    key.push_back(static_cast<char>(in->rank()));
    for (int64_t d = 0; d < l.rank(); ++d) key.push_back(static_cast<char>(l.mesh_dim_of(d)));
    MeshDimMask pm = l.partial_mask();
    append(key, &pm, sizeof(pm));
    if (pm) key.push_back(static_cast<char>(l.partial()[0].op));
    append(key, in->shape().data(), in->shape().size() * sizeof(int64_t));
  }
  return key;
}

}  // namespace

void check_same_mesh(const char* op, const std::vector<const DTensor*>& inputs) {
  for (const DTensor* in : inputs) {
    if (in->mesh() != inputs[0]->mesh()) {
      const auto [first, other] = distinct_mesh_strings(inputs[0]->mesh(), in->mesh());
      throw_error<MeshError>(op, "inputs {} and {} are on different meshes ({} and {})",
                             inputs[0]->short_string(), in->short_string(), first, other);
    }
  }
}

std::shared_ptr<const ShardingDecision> decide_sharding(const OpSignature& signature,
                                                        const std::vector<const DTensor*>& inputs) {
  std::string key = cache_key(signature, inputs);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.decisions.find(key);
    if (it != c.decisions.end()) {
      ++c.hits;
      return it->second;
    }
    ++c.misses;
  }
  auto decision = std::make_shared<const ShardingDecision>(Solver(signature, inputs).solve());
  std::lock_guard<std::mutex> lock(c.mu);
  return c.decisions.emplace(std::move(key), std::move(decision)).first->second;
}

ShardingCacheStats sharding_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.hits, c.misses};
}

}  // namespace dtensor
