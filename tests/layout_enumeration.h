// Test helpers: every layout of a given rank on a mesh, and the standard test meshes.
#pragma once

#include <vector>

#include "layout/layout.h"

namespace dtensor::testing {

// The meshes the property suites sweep: {8}, {2,4}, {2,2,2}.
std::vector<Mesh> standard_meshes();

// Every layout of `rank` over `mesh`: each tensor dim unsharded or on a distinct mesh dim. With
// `with_partial`, also every subset of the remaining mesh dims marked partial (sum).
std::vector<Layout> all_layouts(const Mesh& mesh, int64_t rank, bool with_partial);

}  // namespace dtensor::testing
