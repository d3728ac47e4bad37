#include "dtensor/relayout.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "dtensor/collectives.h"
#include "dtensor/step_observer.h"
#include "runtime/block.h"

namespace dtensor {
namespace {

// Per mesh dim: a tensor dim (>= 0) it shards, kReplicated, or kPartialBase - op.
using State = std::vector<int8_t>;
constexpr int8_t kReplicated = -1;
constexpr int8_t kPartialBase = -2;

bool is_partial_code(int8_t c) { return c <= kPartialBase; }
ReduceOp code_op(int8_t c) { return static_cast<ReduceOp>(kPartialBase - c); }
int8_t partial_code(ReduceOp op) {
  return static_cast<int8_t>(kPartialBase - static_cast<int>(op));
}

State state_of(const Layout& layout) {
  State s(static_cast<size_t>(layout.mesh().rank()), kReplicated);
  for (int64_t d = 0; d < layout.rank(); ++d) {
    if (layout.is_sharded(d)) s[layout.mesh_dim_of(d)] = static_cast<int8_t>(d);
  }
  for (const PartialDim& p : layout.partial()) {
    s[layout.mesh().dim_index(p.mesh_dim)] = partial_code(p.op);
  }
  return s;
}

// The layout of a state, or nothing when it mixes partial ops (not a valid layout).
bool layout_of(const State& s, const Mesh& mesh, int64_t rank, Layout* out) {
  std::vector<std::string> specs(static_cast<size_t>(rank), Layout::kUnsharded);
  std::vector<PartialDim> partial;
  for (size_t m = 0; m < s.size(); ++m) {
    if (s[m] >= 0) specs[s[m]] = mesh.dims()[m].name;
    if (is_partial_code(s[m])) {
      if (!partial.empty() && partial[0].op != code_op(s[m])) return false;
      partial.push_back({mesh.dims()[m].name, code_op(s[m])});
    }
  }
  *out = Layout(std::move(specs), mesh, std::move(partial));
  return true;
}

bool axis_free(const State& s, int64_t axis) {
  for (int8_t c : s) {
    if (c == axis) return false;
  }
  return true;
}

double local_bytes(const State& s, const Mesh& mesh, const Shape& shape, size_t esize) {
  double bytes = static_cast<double>(esize);
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t n = shape[d];
    for (size_t m = 0; m < s.size(); ++m) {
      if (s[m] == static_cast<int8_t>(d)) n = chunk_range(n, mesh.dims()[m].size, 0).size;
    }
    bytes *= static_cast<double>(n);
  }
  return bytes;
}

struct Edge {
  State next;
  RelayoutStep step;
  double cost;
};

// Every single-mesh-dim transition out of `s` that heads toward `target` (partial states are
// only entered when the target has them), on the mesh dims not `frozen`. Callers check that the
// next state is a valid layout (partial ops not mixed).
std::vector<Edge> edges(const State& s, const State& target, const Mesh& mesh, const Shape& shape,
                        size_t esize, const std::vector<bool>& frozen) {
  constexpr double kStepCost = 256;    // latency of a step, in bytes
  constexpr double kLocalCopy = 0.05;  // a local copy costs far less than moving a byte
  const double bytes = local_bytes(s, mesh, shape, esize);
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<Edge> out;
  for (size_t m = 0; m < s.size(); ++m) {
    if (frozen[m]) continue;
    const double k = static_cast<double>(mesh.dims()[m].size);
    const int8_t c = s[m];
    auto add = [&](int8_t code, RelayoutStep step, double cost) {
      State next = s;
      next[m] = code;
      step.mesh_dim = static_cast<int64_t>(m);
      out.push_back({std::move(next), step, cost + kStepCost});
    };
    using Kind = RelayoutStep::Kind;
    if (is_partial_code(c)) {
      add(kReplicated, {Kind::kAllReduce, 0, -1, -1, code_op(c)}, 2 * bytes * (k - 1) / k);
      for (int64_t t = 0; t < rank; ++t) {
        if (axis_free(s, t)) {
          add(static_cast<int8_t>(t), {Kind::kReduceScatter, 0, -1, t, code_op(c)},
              bytes * (k - 1) / k);
        }
      }
    } else if (c >= 0) {
      add(kReplicated, {Kind::kAllGather, 0, c, -1, ReduceOp::kSum}, bytes * (k - 1));
      for (int64_t t = 0; t < rank; ++t) {
        if (axis_free(s, t)) {
          add(static_cast<int8_t>(t), {Kind::kAllToAll, 0, c, t, ReduceOp::kSum},
              bytes * (k - 1) / k);
        }
      }
    } else {
      for (int64_t t = 0; t < rank; ++t) {
        if (axis_free(s, t)) {
          add(static_cast<int8_t>(t), {Kind::kSlice, 0, -1, t, ReduceOp::kSum},
              kLocalCopy * bytes / k);
        }
      }
      if (is_partial_code(target[m])) {
        add(target[m], {Kind::kMakePartial, 0, -1, -1, code_op(target[m])}, kLocalCopy * bytes);
      }
    }
  }
  return out;
}

// Appends the step that moves mesh dim `m` of `s` to `code` (found among the edges, so that
// steps and costs come from one place) and updates `s`.
void take(State& s, size_t m, int8_t code, const State& goal, const Layout& from,
          const Shape& shape, size_t esize, RelayoutPlan& plan) {
  const Mesh& mesh = from.mesh();
  std::vector<bool> only_m(s.size(), true);
  only_m[m] = false;
  for (Edge& e : edges(s, goal, mesh, shape, esize, only_m)) {
    if (e.next[m] != code) continue;
    Layout layout = from;
    DTENSOR_CHECK(layout_of(e.next, mesh, from.rank(), &layout));
    plan.steps.push_back(e.step);
    plan.layouts.push_back(std::move(layout));
    plan.cost_bytes += e.cost;
    s = std::move(e.next);
    return;
  }
  DTENSOR_CHECK(false);
}

bool has_partial_other_than(const State& s, int8_t code) {
  for (int8_t c : s) {
    if (is_partial_code(c) && c != code) return true;
  }
  return false;
}

// A polynomial plan for meshes whose state space is too large to search: each mesh dim takes at
// most two steps (leave its state, take the target's). Moves straight to the target where the
// tensor dim is free (all-to-all, reduce-scatter, slice), releases dims whose target is
// replicated or unreachable in one step, and when every remaining dim waits on another, gathers
// (or reduces) one of them to break the cycle.
void greedy(State& s, const State& goal, const Layout& from, const Shape& shape, size_t esize,
            const std::vector<bool>& frozen, RelayoutPlan& plan) {
  while (true) {
    bool progress = false, done = true;
    for (size_t m = 0; m < s.size(); ++m) {
      if (frozen[m] || s[m] == goal[m]) continue;
      done = false;
      const int8_t want = goal[m];
      if (want >= 0 && axis_free(s, want)) {
        take(s, m, want, goal, from, shape, esize, plan);
      } else if (want == kReplicated || (is_partial_code(want) && s[m] != kReplicated)) {
        take(s, m, kReplicated, goal, from, shape, esize, plan);
      } else if (is_partial_code(want) && !has_partial_other_than(s, want)) {
        take(s, m, want, goal, from, shape, esize, plan);
      } else {
        continue;
      }
      progress = true;
    }
    if (done) return;
    if (progress) continue;
    for (size_t m = 0; m < s.size(); ++m) {
      if (!frozen[m] && s[m] != goal[m] && s[m] != kReplicated) {
        take(s, m, kReplicated, goal, from, shape, esize, plan);
        break;
      }
    }
  }
}

// Shortest path (Dijkstra) over states from `start` to `goal`, moving only mesh dims not
// `frozen`; appends its steps to `plan`.
void search(const State& start, const State& goal, const Layout& from, const Shape& shape,
            size_t esize, const std::vector<bool>& frozen, RelayoutPlan& plan) {
  const Mesh& mesh = from.mesh();
  struct Visit {
    double cost;
    State state;
    bool operator>(const Visit& o) const { return cost > o.cost; }
  };
  std::map<State, double> dist{{start, 0.0}};
  std::map<State, std::pair<State, RelayoutStep>> parent;
  std::priority_queue<Visit, std::vector<Visit>, std::greater<Visit>> queue;
  queue.push({0.0, start});
  while (!queue.empty()) {
    Visit v = queue.top();
    queue.pop();
    if (v.cost > dist[v.state]) continue;
    if (v.state == goal) break;
    for (Edge& e : edges(v.state, goal, mesh, shape, esize, frozen)) {
      Layout check = from;
      if (!layout_of(e.next, mesh, from.rank(), &check)) continue;
      double cost = v.cost + e.cost;
      auto it = dist.find(e.next);
      if (it != dist.end() && it->second <= cost) continue;
      dist[e.next] = cost;
      parent[e.next] = {v.state, e.step};
      queue.push({cost, e.next});
    }
  }
  DTENSOR_CHECK(dist.count(goal) > 0);
  std::vector<RelayoutStep> steps;
  std::vector<Layout> layouts;
  for (State s = goal; s != start;) {
    const auto& [prev, step] = parent.at(s);
    steps.push_back(step);
    Layout layout = from;
    layout_of(s, mesh, from.rank(), &layout);
    layouts.push_back(std::move(layout));
    s = prev;
  }
  plan.steps.insert(plan.steps.end(), steps.rbegin(), steps.rend());
  plan.layouts.insert(plan.layouts.end(), layouts.rbegin(), layouts.rend());
  plan.cost_bytes += dist[goal];
}

// Above this many states (an estimate: per moving mesh dim, one per tensor dim, replicated and
// partial) the exact search gives way to the greedy plan.
constexpr double kMaxSearchStates = 4096;

// The plan from `from` to `to`. Mesh dims of size 1 move no data, so they stay out of the search
// (which is exponential in the number of mesh dims it moves): those that change are released
// first and take their target state last, each a step on a group of one device. The other dims
// are searched exactly when their state space is small (the cheapest order), greedily otherwise.
RelayoutPlan make_plan(const Layout& from, const Layout& to, const Shape& shape, DType dtype) {
  const Mesh& mesh = from.mesh();
  const size_t esize = dtype_size(dtype);
  const State start = state_of(from), goal = state_of(to);
  std::vector<bool> frozen(start.size()), unit(start.size());
  State s = start, middle = goal;  // `middle`: the goal with changing size-1 dims replicated
  RelayoutPlan result;
  double states = 1;
  for (size_t m = 0; m < start.size(); ++m) {
    unit[m] = mesh.dims()[m].size == 1;
    frozen[m] = unit[m];
    if (unit[m] && start[m] != goal[m]) {
      middle[m] = kReplicated;
      if (s[m] != kReplicated) take(s, m, kReplicated, goal, from, shape, esize, result);
    }
    if (!unit[m]) states *= static_cast<double>(shape.size() + 2);
  }
  if (states <= kMaxSearchStates) {
    search(s, middle, from, shape, esize, frozen, result);
  } else {
    greedy(s, middle, from, shape, esize, frozen, result);
  }
  s = middle;
  for (size_t m = 0; m < start.size(); ++m) {
    if (unit[m] && s[m] != goal[m]) take(s, m, goal[m], goal, from, shape, esize, result);
  }
  return result;
}

struct PlanCache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const RelayoutPlan>> plans;
  int64_t hits = 0;
  int64_t misses = 0;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

std::string plan_key(const Layout& from, const Layout& to, const Shape& shape, DType dtype) {
  std::string key;
  key.reserve(64);
  // Not fingerprint(): a plan holds layouts on its mesh, and a process-local mesh shares the
  // fingerprint of the spanning mesh over the same dims.
  uint64_t fp = from.mesh().identity_fingerprint();
  key.append(reinterpret_cast<const char*>(&fp), sizeof(fp));
  for (int8_t c : state_of(from)) key.push_back(static_cast<char>(c));
  key.push_back('|');
  for (int8_t c : state_of(to)) key.push_back(static_cast<char>(c));
  key.push_back(static_cast<char>(dtype));
  key.append(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(int64_t));
  return key;
}

std::vector<int64_t> at_axis(int64_t rank, int64_t axis, int64_t offset) {
  std::vector<int64_t> begin(static_cast<size_t>(rank), 0);
  begin[static_cast<size_t>(axis)] = offset;
  return begin;
}

// Local slice along `step.to_axis`: device with coordinate c along the mesh dim keeps chunk c.
// Devices that slice the same buffer to the same chunk share the result (within one memory space:
// all CPU devices; a GPU only with itself).
std::vector<Tensor> slice_step(const std::vector<Tensor>& shards, const Mesh& mesh,
                               const RelayoutStep& step) {
  const int64_t k = mesh.dims()[step.mesh_dim].size;
  std::vector<Tensor> out;
  out.reserve(shards.size());
  const auto& ids = mesh.local_device_ids();
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tensor& src = shards[i];
    const int64_t c = mesh.coord(ids[i], step.mesh_dim);
    // A linear scan over the few local devices for an earlier device with the same slice.
    size_t j = 0;
    while (j < i && !(shards[j].is_same_as(src) && mesh.coord(ids[j], step.mesh_dim) == c &&
                      same_memory_space(shards[j].device(), src.device()))) {
      ++j;
    }
    if (j < i) {
      out.push_back(out[j].with_device(src.device()));
      continue;
    }
    if (k == 1) {  // one chunk: the whole buffer
      out.push_back(src);
      continue;
    }
    ShardRange r = chunk_range(src.dim(step.to_axis), k, c);
    Shape extent = src.shape();
    extent[step.to_axis] = r.size;
    out.push_back(slice_box(src, at_axis(src.rank(), step.to_axis, r.offset), extent));
  }
  return out;
}

// Replicated -> partial: for sum, devices off coordinate 0 along the mesh dim hold shared zeros;
// max and min keep the value everywhere.
std::vector<Tensor> make_partial_step(const std::vector<Tensor>& shards, const Mesh& mesh,
                                      const RelayoutStep& step) {
  if (step.op != ReduceOp::kSum) return shards;
  std::vector<Tensor> out;
  const auto& ids = mesh.local_device_ids();
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tensor& s = shards[i];
    out.push_back(mesh.coord(ids[i], step.mesh_dim) == 0
                      ? s
                      : Tensor::shared_zeros(s.shape(), s.dtype(), s.device()));
  }
  return out;
}

std::vector<Tensor> run_step(const std::vector<Tensor>& shards, const Mesh& mesh,
                             const RelayoutStep& step) {
  const MeshDimMask dim = MeshDimMask{1} << step.mesh_dim;
  using Kind = RelayoutStep::Kind;
  switch (step.kind) {
    case Kind::kSlice:
      return slice_step(shards, mesh, step);
    case Kind::kMakePartial:
      return make_partial_step(shards, mesh, step);
    case Kind::kAllGather:
      return all_gather(mesh, dim, shards, step.from_axis);
    case Kind::kAllToAll:
      return all_to_all(mesh, dim, shards, step.to_axis, step.from_axis);
    case Kind::kAllReduce:
      return all_reduce(mesh, dim, shards, step.op);
    case Kind::kReduceScatter:
      return reduce_scatter(mesh, dim, shards, step.op, step.to_axis);
  }
  return shards;
}

}  // namespace

std::string RelayoutStep::to_string() const {
  switch (kind) {
    case Kind::kSlice:
      return fmt::format("slice(dim {}: ->{})", mesh_dim, to_axis);
    case Kind::kAllGather:
      return fmt::format("all_gather(dim {}: {}->)", mesh_dim, from_axis);
    case Kind::kAllToAll:
      return fmt::format("all_to_all(dim {}: {}->{})", mesh_dim, from_axis, to_axis);
    case Kind::kAllReduce:
      return fmt::format("all_reduce(dim {}: {})", mesh_dim, reduce_op_name(op));
    case Kind::kReduceScatter:
      return fmt::format("reduce_scatter(dim {}: {} ->{})", mesh_dim, reduce_op_name(op), to_axis);
    case Kind::kMakePartial:
      return fmt::format("make_partial(dim {}: {})", mesh_dim, reduce_op_name(op));
  }
  return "?";
}

std::string RelayoutPlan::to_string() const {
  std::string s;
  for (const RelayoutStep& step : steps) s += (s.empty() ? "" : ", ") + step.to_string();
  return s.empty() ? "(no steps)" : s;
}

std::shared_ptr<const RelayoutPlan> plan_relayout(const Layout& from, const Layout& to,
                                                  const Shape& shape, DType dtype) {
  if (from.mesh() != to.mesh()) {
    const auto [from_mesh, to_mesh] = distinct_mesh_strings(from.mesh(), to.mesh());
    throw_error<LayoutError>("relayout", "cannot move {} on mesh {} to {} on mesh {}",
                             from.short_string(), from_mesh, to.short_string(), to_mesh);
  }
  if (from.rank() != to.rank() || from.rank() != static_cast<int64_t>(shape.size())) {
    throw_error<LayoutError>("relayout", "shape {} with layout {} cannot take layout {}",
                             shape_to_string(shape), from.short_string(), to.short_string());
  }
  PlanCache& cache = plan_cache();
  std::string key = plan_key(from, to, shape, dtype);
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      ++cache.hits;
      return it->second;
    }
    ++cache.misses;
  }
  auto plan = std::make_shared<const RelayoutPlan>(make_plan(from, to, shape, dtype));
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.plans.emplace(std::move(key), std::move(plan)).first->second;
}

namespace {

DTensor run_plan(const DTensor& tensor, const Layout& layout, const RelayoutPlan& plan) {
  std::vector<Tensor> shards = tensor.shards();
  for (const RelayoutStep& step : plan.steps) shards = run_step(shards, tensor.mesh(), step);
  return DTensor::from_trusted_shards(tensor.shape(), tensor.dtype(), layout, std::move(shards));
}

}  // namespace

DTensor relayout(const DTensor& tensor, const Layout& layout) {
  if (tensor.layout() == layout) return tensor;
  auto plan = plan_relayout(tensor.layout(), layout, tensor.shape(), tensor.dtype());
  // A traced relayout keeps its plan: the replay runs the steps without planning or lookup.
  DTensor out = StepObserver::active() == nullptr
                    ? run_plan(tensor, layout, *plan)
                    : StepObserver::active()->call("relayout", {&tensor},
                                                   [plan, layout](const StepObserver::Inputs& in) {
                                                     return run_plan(*in[0], layout, *plan);
                                                   });
  StepObserver::notify_relayout(tensor, out);
  return out;
}

PlanCacheStats relayout_plan_cache_stats() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return {cache.hits, cache.misses, static_cast<int64_t>(cache.plans.size())};
}

void clear_relayout_plan_cache() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.plans.clear();
  cache.hits = cache.misses = 0;
}

}  // namespace dtensor
