#include "mesh/mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "runtime/error.h"

namespace dtensor {

struct Mesh::State {
  std::string name;
  std::vector<MeshDim> dims;
  DeviceType type = DeviceType::kCPU;
  int64_t num_devices = 1;
  std::vector<int64_t> strides;  // row-major strides of the device grid
  std::vector<int64_t> local_ids;
  std::vector<std::string> local_device_names;
  std::string global_devices;  // optional sixth part of the text form, kept verbatim
  int64_t process_index = 0;
  int64_t num_processes = 1;
  uint64_t fingerprint = 0;
  uint64_t identity_fingerprint = 0;
};

namespace {

constexpr const char* kReservedNames[] = {"unsharded", "any", "match"};

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    parts.push_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

bool parse_int(std::string_view text, int64_t* value) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && ptr == text.data() + text.size();
}

std::vector<int64_t> parse_ids(std::string_view text, const char* what, std::string_view whole) {
  std::vector<int64_t> ids;
  if (text.empty()) return ids;
  for (std::string_view part : split(text, ',')) {
    int64_t id;
    if (!parse_int(part, &id)) {
      throw_error<MeshError>("Mesh::from_string", "bad {} '{}' in mesh string '{}'", what, part,
                             whole);
    }
    ids.push_back(id);
  }
  return ids;
}

void validate_dim_name(const std::string& name, const char* function) {
  if (name.empty()) throw_error<MeshError>(function, "mesh dim name is empty");
  for (const char* reserved : kReservedNames) {
    if (name == reserved) {
      throw_error<MeshError>(function, "mesh dim name '{}' is reserved", name);
    }
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) {
      throw_error<MeshError>(
          function, "mesh dim name '{}' has character '{}' (allowed: letters, digits, _-.)", name,
          c);
    }
  }
}

std::string dims_to_string(const std::vector<MeshDim>& dims) {
  std::string s;
  for (const MeshDim& d : dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", d.name, d.size);
  return s;
}

// Validates `dims` (count, names, sizes) and returns the device count, multiplied with overflow
// checks: sizes whose product wraps around must not pass for a small mesh.
int64_t validated_device_count(const std::vector<MeshDim>& dims, const char* function) {
  if (dims.size() > static_cast<size_t>(Mesh::kMaxDims)) {
    throw_error<MeshError>(function, "mesh has {} dims; at most {} are supported", dims.size(),
                           Mesh::kMaxDims);
  }
  int64_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    validate_dim_name(dims[i].name, function);
    if (dims[i].size < 1) {
      throw_error<MeshError>(function, "mesh dim '{}' has size {}; sizes must be >= 1",
                             dims[i].name, dims[i].size);
    }
    for (size_t j = 0; j < i; ++j) {
      if (dims[j].name == dims[i].name) {
        throw_error<MeshError>(function, "mesh dim name '{}' appears twice", dims[i].name);
      }
    }
    if (__builtin_mul_overflow(n, dims[i].size, &n) || n > Mesh::kMaxDevices) {
      throw_error<MeshError>(function, "mesh {} has more than {} devices", dims_to_string(dims),
                             Mesh::kMaxDevices);
    }
  }
  return n;
}

uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string local_device_name(int64_t num_processes, int64_t process, DeviceType type,
                              int64_t index) {
  if (num_processes == 1) {
    return fmt::format("/job:localhost/replica:0/task:0/device:{}:{}", device_type_name(type),
                       index);
  }
  return fmt::format("/job:worker/replica:0/task:{}/device:{}:{}", process, device_type_name(type),
                     index);
}

// The device type in a TF device name "...device:CPU:3".
DeviceType device_type_of_name(std::string_view device_name, std::string_view whole) {
  size_t pos = device_name.rfind("device:");
  if (pos != std::string_view::npos) {
    std::string_view rest = device_name.substr(pos + 7);
    size_t colon = rest.find(':');
    std::string_view type = rest.substr(0, colon);
    if (type == "CPU") return DeviceType::kCPU;
    if (type == "GPU") return DeviceType::kGPU;
  }
  throw_error<MeshError>("Mesh::from_string", "bad device name '{}' in mesh string '{}'",
                         device_name, whole);
}

}  // namespace

std::vector<MeshDim> parse_mesh_dims(std::string_view text) {
  std::vector<MeshDim> dims;
  if (text.empty()) return dims;
  for (std::string_view part : split(text, ',')) {
    size_t eq = part.find('=');
    int64_t size = 0;
    if (eq == std::string_view::npos || !parse_int(part.substr(eq + 1), &size)) {
      throw_error<MeshError>("parse_mesh_dims", "bad mesh dim '{}' in '{}' (expected name=size)",
                             part, text);
    }
    dims.push_back({std::string(part.substr(0, eq)), size});
  }
  return dims;
}

Mesh Mesh::build(std::string name, std::vector<MeshDim> dims, DeviceType type,
                 std::vector<int64_t> local_ids, std::string global_devices, const char* function) {
  auto state = std::make_shared<State>();
  state->num_devices = validated_device_count(dims, function);
  for (char c : name) {
    if (c == '|' || c == ',') throw_error<MeshError>(function, "mesh name '{}' has '{}'", name, c);
  }
  int64_t n = state->num_devices;
  int64_t l = static_cast<int64_t>(local_ids.size());
  if (l == 0 || n % l != 0) {
    throw_error<MeshError>(function,
                           "{} local device ids for a mesh of {} devices; a process owns a "
                           "non-empty block whose size divides the device count",
                           l, n);
  }
  for (int64_t i = 0; i < l; ++i) {
    if (local_ids[0] < 0 || local_ids[0] >= n || local_ids[i] != local_ids[0] + i ||
        local_ids[0] % l != 0 || local_ids[i] >= n) {
      throw_error<MeshError>(function,
                             "local device ids [{}] are not a contiguous block [k*{}, (k+1)*{}) "
                             "of 0..{}",
                             fmt::join(local_ids, ","), l, l, n - 1);
    }
  }
  state->name = std::move(name);
  state->dims = std::move(dims);
  state->type = type;
  state->strides.assign(state->dims.size(), 1);
  for (size_t i = state->dims.size(); i-- > 1;) {
    state->strides[i - 1] = state->strides[i] * state->dims[i].size;
  }
  state->num_processes = n / l;
  state->process_index = local_ids[0] / l;
  state->local_ids = std::move(local_ids);
  for (int64_t i = 0; i < l; ++i) {
    state->local_device_names.push_back(
        local_device_name(state->num_processes, state->process_index, type, i));
  }
  state->global_devices = std::move(global_devices);
  std::string global = fmt::format("{}|{}|{}", state->name, device_type_name(type), n);
  for (const MeshDim& d : state->dims) global += fmt::format("|{}={}", d.name, d.size);
  state->fingerprint = fnv1a(global);
  state->identity_fingerprint =
      fnv1a(fmt::format("{}|local={},{}", global, state->local_ids.front(), l));
  return Mesh(std::move(state));
}

Mesh Mesh::create(std::vector<MeshDim> dims, DeviceType type, int64_t process_index,
                  int64_t num_processes, std::string name) {
  const int64_t n = validated_device_count(dims, "Mesh::create");
  if (num_processes < 1 || process_index < 0 || process_index >= num_processes ||
      n % num_processes != 0) {
    throw_error<MeshError>("Mesh::create",
                           "process {} of {} cannot own an equal block of a mesh of {} devices",
                           process_index, num_processes, n);
  }
  int64_t l = n / num_processes;
  std::vector<int64_t> local(static_cast<size_t>(l));
  for (int64_t i = 0; i < l; ++i) local[i] = process_index * l + i;
  return build(std::move(name), std::move(dims), type, std::move(local), "", "Mesh::create");
}

Mesh Mesh::from_string(std::string_view text) {
  std::vector<std::string_view> parts = split(text, '|');
  if (parts.size() != 5 && parts.size() != 6) {
    throw_error<MeshError>("Mesh::from_string",
                           "mesh string '{}' has {} '|'-separated parts; expected "
                           "name|dims|global ids|local ids|local devices[|global devices]",
                           text, parts.size());
  }
  std::vector<MeshDim> dims = parse_mesh_dims(parts[1]);
  std::vector<int64_t> global_ids = parse_ids(parts[2], "global id", text);
  std::vector<int64_t> local_ids = parse_ids(parts[3], "local id", text);
  std::vector<std::string_view> devices =
      parts[4].empty() ? std::vector<std::string_view>{} : split(parts[4], ',');
  const int64_t n = validated_device_count(dims, "Mesh::from_string");
  for (size_t i = 0; i < global_ids.size(); ++i) {
    if (global_ids[i] != static_cast<int64_t>(i) || static_cast<int64_t>(global_ids.size()) != n) {
      throw_error<MeshError>("Mesh::from_string",
                             "global ids in '{}' must be 0..{} in order ({} ids given)", text,
                             n - 1, global_ids.size());
    }
  }
  if (static_cast<int64_t>(global_ids.size()) != n) {
    throw_error<MeshError>("Mesh::from_string", "mesh '{}' has {} devices but {} global ids", text,
                           n, global_ids.size());
  }
  if (devices.size() != local_ids.size()) {
    throw_error<MeshError>("Mesh::from_string", "mesh '{}' has {} local ids but {} local devices",
                           text, local_ids.size(), devices.size());
  }
  DeviceType type = DeviceType::kCPU;
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceType t = device_type_of_name(devices[i], text);
    if (i > 0 && t != type) {
      throw_error<MeshError>("Mesh::from_string", "mesh '{}' mixes device types", text);
    }
    type = t;
  }
  Mesh mesh = build(std::string(parts[0]), std::move(dims), type, std::move(local_ids),
                    parts.size() == 6 ? std::string(parts[5]) : "", "Mesh::from_string");
  // Keep the given device names so that the text round-trips.
  auto state = std::make_shared<State>(*mesh.state_);
  state->local_device_names.assign(devices.begin(), devices.end());
  return Mesh(std::move(state));
}

const std::string& Mesh::name() const { return state_->name; }
const std::vector<MeshDim>& Mesh::dims() const { return state_->dims; }
DeviceType Mesh::device_type() const { return state_->type; }
int64_t Mesh::num_devices() const { return state_->num_devices; }
int64_t Mesh::num_processes() const { return state_->num_processes; }
int64_t Mesh::process_index() const { return state_->process_index; }
int64_t Mesh::num_local_devices() const { return static_cast<int64_t>(state_->local_ids.size()); }
const std::vector<int64_t>& Mesh::local_device_ids() const { return state_->local_ids; }
uint64_t Mesh::fingerprint() const { return state_->fingerprint; }
uint64_t Mesh::identity_fingerprint() const { return state_->identity_fingerprint; }

int64_t Mesh::dim_index(std::string_view name) const {
  for (size_t i = 0; i < state_->dims.size(); ++i) {
    if (state_->dims[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t Mesh::dim_size(std::string_view name) const {
  int64_t i = dim_index(name);
  if (i < 0)
    throw_error<MeshError>("Mesh::dim_size", "no dim '{}' in mesh {}", name, dims_string());
  return state_->dims[i].size;
}

void Mesh::check_device_id(int64_t device_id, const char* function) const {
  if (device_id < 0 || device_id >= state_->num_devices) {
    throw_error<MeshError>(function, "device id {} is out of range for mesh {} ({} devices)",
                           device_id, dims_string(), state_->num_devices);
  }
}

void Mesh::check_dim(int64_t dim, const char* function) const {
  if (dim < 0 || dim >= rank()) {
    throw_error<MeshError>(function, "mesh dim index {} is out of range for mesh {} (rank {})", dim,
                           dims_string(), rank());
  }
}

void Mesh::check_mask(MeshDimMask mask, const char* function) const {
  if (rank() < 32 && (mask >> rank()) != 0) {
    throw_error<MeshError>(function, "dim mask {:#x} names dims beyond mesh {} (rank {})", mask,
                           dims_string(), rank());
  }
}

bool Mesh::is_local(int64_t device_id) const {
  const auto& ids = state_->local_ids;
  return device_id >= ids.front() && device_id <= ids.back();
}

int64_t Mesh::local_index(int64_t device_id) const {
  if (!is_local(device_id)) {
    throw_error<MeshError>("Mesh::local_index", "device {} is not local to process {} of mesh {}",
                           device_id, state_->process_index, to_string());
  }
  return device_id - state_->local_ids.front();
}

int64_t Mesh::owner_process(int64_t device_id) const {
  check_device_id(device_id, "Mesh::owner_process");
  return device_id / num_local_devices();
}

std::vector<int64_t> Mesh::coords(int64_t device_id) const {
  check_device_id(device_id, "Mesh::coords");
  std::vector<int64_t> c(state_->dims.size());
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = (device_id / state_->strides[i]) % state_->dims[i].size;
  return c;
}

int64_t Mesh::coord(int64_t device_id, int64_t dim) const {
  check_device_id(device_id, "Mesh::coord");
  check_dim(dim, "Mesh::coord");
  return (device_id / state_->strides[dim]) % state_->dims[dim].size;
}

int64_t Mesh::device_id(const std::vector<int64_t>& coords) const {
  if (coords.size() != state_->dims.size()) {
    throw_error<MeshError>("Mesh::device_id", "{} coordinates for a mesh of rank {}", coords.size(),
                           state_->dims.size());
  }
  int64_t id = 0;
  for (size_t i = 0; i < coords.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= state_->dims[i].size) {
      throw_error<MeshError>("Mesh::device_id", "coordinate {} out of range for dim {}={}",
                             coords[i], state_->dims[i].name, state_->dims[i].size);
    }
    id += coords[i] * state_->strides[i];
  }
  return id;
}

MeshDimMask Mesh::mask(const std::vector<std::string>& dim_names) const {
  MeshDimMask m = 0;
  for (const std::string& name : dim_names) {
    int64_t i = dim_index(name);
    if (i < 0) throw_error<MeshError>("Mesh::mask", "no dim '{}' in mesh {}", name, dims_string());
    m |= MeshDimMask{1} << i;
  }
  return m;
}

int64_t Mesh::group_size(MeshDimMask mask) const {
  check_mask(mask, "Mesh::group_size");
  int64_t size = 1;
  for (size_t i = 0; i < state_->dims.size(); ++i) {
    if (mask & (MeshDimMask{1} << i)) size *= state_->dims[i].size;
  }
  return size;
}

std::vector<int64_t> Mesh::group(int64_t device_id, MeshDimMask mask) const {
  check_device_id(device_id, "Mesh::group");
  check_mask(mask, "Mesh::group");
  // Zero the coordinates along `mask`, then enumerate them row-major.
  int64_t base = device_id;
  std::vector<size_t> free_dims;
  for (size_t i = 0; i < state_->dims.size(); ++i) {
    if (mask & (MeshDimMask{1} << i)) {
      base -= coord(device_id, static_cast<int64_t>(i)) * state_->strides[i];
      free_dims.push_back(i);
    }
  }
  std::vector<int64_t> members{base};
  for (size_t i : free_dims) {
    std::vector<int64_t> next;
    next.reserve(members.size() * state_->dims[i].size);
    for (int64_t m : members) {
      for (int64_t c = 0; c < state_->dims[i].size; ++c) next.push_back(m + c * state_->strides[i]);
    }
    members.swap(next);
  }
  return members;
}

std::vector<std::vector<int64_t>> Mesh::groups(MeshDimMask mask) const {
  check_mask(mask, "Mesh::groups");
  std::vector<std::vector<int64_t>> result;
  std::vector<bool> seen(static_cast<size_t>(num_devices()), false);
  for (int64_t id = 0; id < num_devices(); ++id) {
    if (seen[id]) continue;
    result.push_back(group(id, mask));
    for (int64_t m : result.back()) seen[m] = true;
  }
  return result;
}

int64_t Mesh::index_in_group(int64_t device_id, MeshDimMask mask) const {
  check_device_id(device_id, "Mesh::index_in_group");
  check_mask(mask, "Mesh::index_in_group");
  int64_t index = 0;
  for (size_t i = 0; i < state_->dims.size(); ++i) {
    if (mask & (MeshDimMask{1} << i)) {
      index = index * state_->dims[i].size + coord(device_id, static_cast<int64_t>(i));
    }
  }
  return index;
}

std::string Mesh::dims_string() const { return dims_to_string(state_->dims); }

std::string Mesh::identity_string() const {
  const std::string name = state_->name.empty() ? "" : fmt::format("'{}' ", state_->name);
  const auto& ids = state_->local_ids;
  const std::string span = state_->num_processes == 1 ? "process-local, ids"
                                                      : fmt::format("spans {} processes, local ids",
                                                                    state_->num_processes);
  return fmt::format("{}{} ({}, {} {}-{})", name, dims_string(), device_type_name(state_->type),
                     span, ids.front(), ids.back());
}

std::pair<std::string, std::string> distinct_mesh_strings(const Mesh& a, const Mesh& b) {
  std::string da = a.dims_string(), db = b.dims_string();
  if (da != db) return {std::move(da), std::move(db)};
  return {a.identity_string(), b.identity_string()};
}

std::string Mesh::to_string() const {
  std::vector<int64_t> global(static_cast<size_t>(num_devices()));
  for (int64_t i = 0; i < num_devices(); ++i) global[i] = i;
  std::string s =
      fmt::format("{}|{}|{}|{}|{}", state_->name, dims_string(), fmt::join(global, ","),
                  fmt::join(state_->local_ids, ","), fmt::join(state_->local_device_names, ","));
  if (!state_->global_devices.empty()) s += "|" + state_->global_devices;
  return s;
}

bool operator==(const Mesh& a, const Mesh& b) {
  if (a.state_ == b.state_) return true;
  if (a.fingerprint() != b.fingerprint() || a.name() != b.name() ||
      a.device_type() != b.device_type() || a.local_device_ids() != b.local_device_ids() ||
      a.dims().size() != b.dims().size()) {
    return false;
  }
  for (size_t i = 0; i < a.dims().size(); ++i) {
    if (a.dims()[i].name != b.dims()[i].name || a.dims()[i].size != b.dims()[i].size) return false;
  }
  return true;
}

}  // namespace dtensor
