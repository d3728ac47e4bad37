// The collective backend of a mesh: the runtime's registry (runtime/backend_registry.h) asked with
// the mesh's device type and whether it spans processes.
//
// Thread-safety: as the registry's lookup (no lock; do not register while collectives run).
#pragma once

#include "mesh/mesh.h"
#include "runtime/backend_registry.h"

namespace dtensor {

// The backend a collective over `mesh` goes to. Throws UnimplementedError "[collective] no
// collective backend is registered for GPU devices (mesh batch=2)" when its type has none;
// `collective` names the calling collective in that message.
CollectiveBackend& collective_backend_for(const Mesh& mesh,
                                          const char* collective = "collective_backend_for");

}  // namespace dtensor
