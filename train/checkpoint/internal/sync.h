// Coordination between the processes taking part in a save or restore, over the collectives of
// their mesh (dtensor/collectives.h; the in-process backend or MPI). With one process, or no mesh
// at all, nothing is exchanged.
//
// Collective: every process of the mesh makes the same calls in the same order.
#pragma once

#include <optional>
#include <string>

#include "mesh/mesh.h"

namespace dtensor::checkpoint_internal {

// A fresh 16-hex-digit id, the same on every process (process 0's, broadcast).
std::string make_save_id(const std::optional<Mesh>& mesh);

// Waits for every process (dtensor::barrier) and returns whether all of them passed ok == true.
bool all_succeeded(const std::optional<Mesh>& mesh, bool ok);

}  // namespace dtensor::checkpoint_internal
