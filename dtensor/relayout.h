// relayout: moves a DTensor to another layout on the same mesh.
//
// Each mesh dim is in one of three states: replicated, sharding one tensor dim, or partial. A
// relayout is a sequence of per-mesh-dim transitions (docs/design.md §2):
//   sharded(d) -> replicated      all-gather
//   sharded(a) -> sharded(b)      all-to-all
//   replicated -> sharded(d)      local slice
//   partial    -> replicated      all-reduce
//   partial    -> sharded(d)      reduce-scatter
//   replicated -> partial         local: sum keeps the value on the first device, zeros elsewhere;
//                                 max/min keep it everywhere
// The planner searches the orders of these steps for the one that moves the fewest bytes per
// device (a shortest path over intermediate layouts) and caches the plan by (source layout,
// target layout, shape, dtype). The plan cache is thread-safe. Planning is polynomial in the mesh
// rank: size-1 mesh dims (which move no data) stay out of the search, and when the remaining
// state space is too large to search (many mesh dims) a greedy plan takes at most two steps per
// mesh dim instead of the cheapest order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor {

struct RelayoutStep {
  enum class Kind : uint8_t {
    kSlice,
    kAllGather,
    kAllToAll,
    kAllReduce,
    kReduceScatter,
    kMakePartial
  };
  Kind kind;
  int64_t mesh_dim = 0;
  int64_t from_axis = -1;  // tensor dim leaving the mesh dim (gather, all-to-all)
  int64_t to_axis = -1;    // tensor dim taking the mesh dim (slice, all-to-all, reduce-scatter)
  ReduceOp op = ReduceOp::kSum;

  std::string to_string() const;  // e.g. "all_to_all(x: 0->1)"
};

struct RelayoutPlan {
  std::vector<RelayoutStep> steps;
  std::vector<Layout> layouts;  // layout after each step
  double cost_bytes = 0;        // bytes moved per device, as the cost model counts them

  std::string to_string() const;
};

// The cheapest plan from `from` to `to` for a tensor of `shape` and `dtype` (cached; plans are
// immutable and shared).
std::shared_ptr<const RelayoutPlan> plan_relayout(const Layout& from, const Layout& to,
                                                  const Shape& shape, DType dtype);

// `tensor` in `layout`. Throws LayoutError naming "relayout" for a layout on another mesh or of
// another rank. A relayout that changes the layout is reported to the observers of the step
// (StepObserver::notify_relayout, dtensor/step_observer.h), so that the move is differentiable:
// on an active gradient tape the gradient flows back through it.
DTensor relayout(const DTensor& tensor, const Layout& layout);

struct PlanCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t size = 0;
};
PlanCacheStats relayout_plan_cache_stats();
void clear_relayout_plan_cache();

}  // namespace dtensor
