#include "tests/layout_enumeration.h"

#include "runtime/process.h"

namespace dtensor::testing {

Mesh test_mesh(std::vector<MeshDim> dims) {
  const ProcessInfo process = this_process();
  return Mesh::create(std::move(dims), DeviceType::kCPU, process.index, process.count);
}

std::vector<Mesh> standard_meshes() {
  return {test_mesh({{"batch", 8}}), test_mesh({{"x", 2}, {"y", 4}}),
          test_mesh({{"a", 2}, {"b", 2}, {"c", 2}})};
}

namespace {

void extend(const Mesh& mesh, int64_t rank, bool with_partial, std::vector<std::string>& specs,
            MeshDimMask used, std::vector<Layout>& out) {
  if (static_cast<int64_t>(specs.size()) == rank) {
    if (!with_partial) {
      out.emplace_back(specs, mesh);
      return;
    }
    MeshDimMask free = static_cast<MeshDimMask>((1u << mesh.rank()) - 1) & ~used;
    // Every subset of the free dims, as partial sums.
    for (MeshDimMask sub = free;; sub = (sub - 1) & free) {
      std::vector<PartialDim> partial;
      for (int64_t d = 0; d < mesh.rank(); ++d) {
        if (sub & (1u << d)) partial.push_back({mesh.dims()[d].name, ReduceOp::kSum});
      }
      out.emplace_back(specs, mesh, partial);
      if (sub == 0) break;
    }
    return;
  }
  specs.push_back(Layout::kUnsharded);
  extend(mesh, rank, with_partial, specs, used, out);
  specs.pop_back();
  for (int64_t d = 0; d < mesh.rank(); ++d) {
    if (used & (1u << d)) continue;
    specs.push_back(mesh.dims()[d].name);
    extend(mesh, rank, with_partial, specs, used | (1u << d), out);
    specs.pop_back();
  }
}

}  // namespace

std::vector<Layout> all_layouts(const Mesh& mesh, int64_t rank, bool with_partial) {
  std::vector<Layout> out;
  std::vector<std::string> specs;
  extend(mesh, rank, with_partial, specs, 0, out);
  return out;
}

}  // namespace dtensor::testing
