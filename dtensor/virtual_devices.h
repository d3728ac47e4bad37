// Virtual CPU devices: how many devices of a mesh this process runs (TF's
// `configure_virtual_cpus(8)` followed by `create_mesh`), and creating the meshes that run on them.
//
// Mesh::create and Mesh::from_string only describe a mesh (a GPU mesh can be described, printed
// and fingerprinted anywhere); create_mesh is where a mesh is made to run, so it is where a GPU
// mesh in a build without CUDA fails.
//
// The count is process-wide; set it before creating meshes. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "mesh/mesh.h"

namespace dtensor {

// Exposes `n` virtual CPU devices in this process (InvalidArgumentError for n < 1).
void configure_virtual_cpus(int64_t n);
// The configured count (1 until configured).
int64_t num_virtual_cpus();

// A CPU mesh over `dims` whose device count must equal the virtual CPUs of this process times the
// number of processes (MeshError otherwise, naming both counts); process k owns devices
// [k*L, (k+1)*L) (TF DTensor's create_distributed_mesh). With several processes the call is
// collective: every process must create the same mesh, and a mismatch throws MeshError on every
// process.
Mesh create_mesh(std::vector<MeshDim> dims, std::string name = "");
// The same mesh over devices of `type`. A GPU mesh needs a registered GPU backend (CUDA, or the
// emulated GPU when DTENSOR_EMULATED_GPUS is set): without one it throws UnimplementedError
// ("[create_mesh] mesh |batch=2| has GPU devices, but no GPU backend is registered ...") before
// anything else is checked.
Mesh create_mesh(std::vector<MeshDim> dims, DeviceType type, std::string name = "");

// One call, like jax.make_mesh: parses "batch=2,model=4", configures this process's virtual CPUs
// to its share of the devices (all 8 alone; 4 each under `mpirun -np 2`), and creates the mesh as
// above. MeshError for malformed text or a device count the processes cannot split evenly.
Mesh create_mesh(const char* dims, std::string name = "");
Mesh create_mesh(const char* dims, DeviceType type, std::string name = "");

}  // namespace dtensor
