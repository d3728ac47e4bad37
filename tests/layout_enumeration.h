// Test helpers: every layout of a given rank on a mesh, and the standard test meshes.
#pragma once

#include <vector>

#include "layout/layout.h"

namespace dtensor::testing {

// A CPU mesh over `dims`, its devices split over the processes of this job (runtime/process.h)
// the way create_mesh splits them: the same tests then run in one process or under mpirun.
Mesh test_mesh(std::vector<MeshDim> dims);

// The meshes the property suites sweep: {8}, {2,4}, {2,2,2}.
std::vector<Mesh> standard_meshes();

// Every layout of `rank` over `mesh`: each tensor dim unsharded or on a distinct mesh dim. With
// `with_partial`, also every subset of the remaining mesh dims marked partial (sum).
std::vector<Layout> all_layouts(const Mesh& mesh, int64_t rank, bool with_partial);

}  // namespace dtensor::testing
