#include "train/parallel/plan.h"

#include <vector>

#include "runtime/error.h"

namespace dtensor::parallel {

namespace {

const std::string kU = Layout::kUnsharded;

std::string or_unsharded(const std::string& dim) { return dim.empty() ? kU : dim; }

}  // namespace

std::string ParallelPlan::to_string() const {
  std::string s;
  auto part = [&s](const char* key, const std::string& dim) {
    if (!dim.empty()) s += (s.empty() ? "" : " ") + std::string(key) + "=" + dim;
  };
  part("data", data);
  part("model", model);
  part("seq", seq);
  auto flag = [&s](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  flag(fsdp, "fsdp");
  flag(reshard_after_forward, "reshard_after_forward");
  flag(prefetch, "prefetch");
  return s.empty() ? "replicated" : s;
}

void ParallelPlan::validate(const Mesh& mesh, const char* function) const {
  for (const std::string* dim : {&data, &model, &seq}) {
    if (!dim->empty() && !mesh.has_dim(*dim)) {
      throw_error<InvalidArgumentError>(function, "mesh {} has no dim '{}' (plan {})",
                                        mesh.dims_string(), *dim, to_string());
    }
  }
  if (!data.empty() && (data == model || data == seq)) {
    throw_error<InvalidArgumentError>(function, "plan {} uses '{}' for data and another kind",
                                      to_string(), data);
  }
  if (fsdp && data.empty()) {
    throw_error<InvalidArgumentError>(function, "plan {} shards parameters with no data dim",
                                      to_string());
  }
  if (reshard_after_forward && !fsdp) {
    throw_error<InvalidArgumentError>(function, "plan {} reshards weights that are not sharded",
                                      to_string());
  }
  if (prefetch && !fsdp) {
    throw_error<InvalidArgumentError>(function, "plan {} prefetches weights that are not sharded",
                                      to_string());
  }
}

Layout residual_layout(const ParallelPlan& plan, const Mesh& mesh) {
  return Layout({or_unsharded(plan.data), or_unsharded(plan.seq), kU}, mesh);
}

Layout colwise_input_layout(const ParallelPlan& plan, const Mesh& mesh) {
  const bool gathered = !plan.seq.empty() && plan.seq == plan.model;
  return Layout({or_unsharded(plan.data), gathered ? kU : or_unsharded(plan.seq), kU}, mesh);
}

Layout colwise_output_layout(const ParallelPlan& plan, const Mesh& mesh) {
  std::vector<std::string> specs = colwise_input_layout(plan, mesh).sharding_specs();
  specs[2] = or_unsharded(plan.model);
  return Layout(specs, mesh);
}

Layout compute_layout(const ParallelPlan& plan, const Mesh& mesh, int64_t rank, Split split) {
  std::vector<std::string> specs(static_cast<size_t>(rank), kU);
  if (split == Split::kOutput) specs.back() = or_unsharded(plan.model);
  if (split == Split::kInput && rank == 2) specs[0] = or_unsharded(plan.model);
  return Layout(specs, mesh);
}

Layout stored_layout(const ParallelPlan& plan, const Mesh& mesh, int64_t rank, Split split) {
  std::vector<std::string> specs = compute_layout(plan, mesh, rank, split).sharding_specs();
  if (plan.fsdp) {
    for (std::string& s : specs) {
      if (s != kU) continue;
      s = plan.data;
      break;
    }
  }
  return Layout(specs, mesh);
}

}  // namespace dtensor::parallel
