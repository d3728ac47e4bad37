// Mesh: a grid of devices with named dimensions.
//
// Devices have global ids 0..N-1 laid out row-major over the dims (the last dim varies fastest).
// A process owns one contiguous block of ids: process k of P owns [k*L, (k+1)*L) with L = N/P.
// A *group* along a subset of mesh dims is the set of devices that differ only in those dims;
// collectives run over groups.
//
// The textual form follows TF DTensor's mesh strings and round-trips:
//   "<name>|batch=2,model=4|0,...,7|<local ids>|<local device names>"
// with local device names "/job:localhost/replica:0/task:0/device:CPU:0" (one process) or
// "/job:worker/replica:0/task:<k>/device:CPU:<i>" (several). An optional sixth part lists the
// global device names and is kept as given.
//
// A Mesh is an immutable value, cheap to copy (shared state); all methods are const and safe to
// call from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/device.h"

namespace dtensor {

struct MeshDim {
  std::string name;
  int64_t size = 0;
};

// A subset of a mesh's dims as a bit set over dim indices (bit i = dim i).
using MeshDimMask = uint32_t;

class Mesh {
 public:
  static constexpr int kMaxDims = 16;
  // Device counts above this are rejected: the mesh lists every id in its text form.
  static constexpr int64_t kMaxDevices = int64_t{1} << 20;

  // A mesh over `dims`; process `process_index` of `num_processes` owns its contiguous block of
  // device ids. Throws MeshError for invalid dims (more than kMaxDims, a name that is empty,
  // reserved or has characters other than letters, digits and _-., a repeated name, a size < 1,
  // more than kMaxDevices devices) or a device count not divisible by the process count.
  // A mesh is a description: a GPU mesh can be created, printed and fingerprinted in any build.
  // Running on it is what needs a GPU backend: create_mesh (dtensor/virtual_devices.h) and GPU
  // allocations fail in a build without CUDA.
  static Mesh create(std::vector<MeshDim> dims, DeviceType type, int64_t process_index = 0,
                     int64_t num_processes = 1, std::string name = "");
  // Parses the textual form; throws MeshError with the offending text.
  static Mesh from_string(std::string_view text);

  const std::string& name() const;
  const std::vector<MeshDim>& dims() const;
  int64_t rank() const { return static_cast<int64_t>(dims().size()); }
  DeviceType device_type() const;
  int64_t num_devices() const;
  // Index of the dim called `name`, or -1.
  int64_t dim_index(std::string_view name) const;
  // Size of the dim called `name`; throws MeshError if there is none.
  int64_t dim_size(std::string_view name) const;
  bool has_dim(std::string_view name) const { return dim_index(name) >= 0; }

  // Process ownership.
  int64_t num_processes() const;
  int64_t process_index() const;
  int64_t num_local_devices() const;
  // The global ids this process owns, ascending.
  const std::vector<int64_t>& local_device_ids() const;
  bool is_local(int64_t device_id) const;
  // Position of a local device id in local_device_ids(); throws MeshError if not local.
  int64_t local_index(int64_t device_id) const;
  // The process that owns `device_id`.
  int64_t owner_process(int64_t device_id) const;

  // Every query taking a device id, mesh dim index or dim mask throws MeshError, naming the mesh,
  // for an id outside 0..num_devices()-1, an index outside 0..rank()-1 or a mask with bits at or
  // above rank().

  // Coordinates <-> global id, row-major over dims().
  std::vector<int64_t> coords(int64_t device_id) const;
  int64_t coord(int64_t device_id, int64_t dim) const;
  int64_t device_id(const std::vector<int64_t>& coords) const;

  // Mask of the named dims; throws MeshError for an unknown name.
  MeshDimMask mask(const std::vector<std::string>& dim_names) const;
  // The devices that differ from `device_id` only along the dims in `mask`, ordered row-major
  // over those dims. An empty mask gives {device_id}.
  std::vector<int64_t> group(int64_t device_id, MeshDimMask mask) const;
  // All groups along `mask`, a partition of the devices, ordered by their first device.
  std::vector<std::vector<int64_t>> groups(MeshDimMask mask) const;
  // Number of devices in one group along `mask`.
  int64_t group_size(MeshDimMask mask) const;
  // Position of `device_id` within its group along `mask`.
  int64_t index_in_group(int64_t device_id, MeshDimMask mask) const;

  // 64-bit hash of the global part (name, dims, device type, global ids): identical on every
  // process that built the same mesh, different for different meshes.
  uint64_t fingerprint() const;
  // 64-bit hash of everything operator== compares: the global part and the block of device ids
  // this process owns (so its process span). A process-local mesh and one spanning processes
  // over the same dims share a fingerprint() but not this: key caches of per-mesh decisions
  // (relayout plans, sharding decisions) on it.
  uint64_t identity_fingerprint() const;

  std::string to_string() const;
  // "batch=2,model=4": the dims alone, for short messages.
  std::string dims_string() const;
  // The dims with what else tells meshes apart, for messages about two meshes whose dims look
  // the same: "'m' replica=4 (CPU, spans 2 processes, local ids 0-1)",
  // "replica=4 (CPU, process-local, ids 0-3)".
  std::string identity_string() const;

  friend bool operator==(const Mesh& a, const Mesh& b);
  friend bool operator!=(const Mesh& a, const Mesh& b) { return !(a == b); }

 private:
  struct State;
  explicit Mesh(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  void check_device_id(int64_t device_id, const char* function) const;
  void check_dim(int64_t dim, const char* function) const;
  void check_mask(MeshDimMask mask, const char* function) const;
  static Mesh build(std::string name, std::vector<MeshDim> dims, DeviceType type,
                    std::vector<int64_t> local_ids, std::string global_devices,
                    const char* function);

  std::shared_ptr<const State> state_;
};

// How a message names two meshes that are not equal: their dims_string()s when those differ,
// otherwise their identity_string()s, so that the message never names two alike-looking meshes.
std::pair<std::string, std::string> distinct_mesh_strings(const Mesh& a, const Mesh& b);

// Parses "batch=2,model=4" into dims; throws MeshError for malformed text.
std::vector<MeshDim> parse_mesh_dims(std::string_view text);

}  // namespace dtensor
