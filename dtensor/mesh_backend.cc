#include "dtensor/mesh_backend.h"

namespace dtensor {

CollectiveBackend& collective_backend_for(const Mesh& mesh, const char* collective) {
  return collective_backend_for(mesh.device_type(), mesh.num_processes() != 1, mesh.dims_string(),
                                collective);
}

}  // namespace dtensor
