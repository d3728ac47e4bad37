// Moving shards between DTensors and checkpoint files: which shards a process writes, writing
// them into one safetensors file with checksums, and reading back the parts of saved shards that
// a process's target shards need. Work is spread over ThreadPool::global(): checksums and writes
// (or reads and checks) of 1 MiB blocks, so checksumming overlaps the I/O.
//
// Functions are thread-safe with respect to each other; each call uses the pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "train/checkpoint/internal/boxes.h"
#include "train/checkpoint/internal/index.h"

namespace dtensor::checkpoint_internal {

inline constexpr uint64_t kChecksumBlockBytes = uint64_t{1} << 20;

struct ShardToWrite {
  std::string entry;  // variable entry name
  std::string key;    // "<entry>@<offset,...>"
  Box box;
  DType dtype = DType::kF32;
  Tensor data;  // the shard in host memory: itself on a CPU device, a host copy of a GPU's
};

// The shards of `value` this process writes: for each distinct non-empty shard whose lowest
// holder (the device with coordinate 0 along every mesh dim the layout does not shard) is a local
// device, that device's shard, staged through host memory when it lives on a GPU
// (dtensor/host_copy.h host_readable). Ascending device order.
std::vector<ShardToWrite> shards_to_write(const std::string& entry, const DTensor& value);

// Writes `shards` back to back into directory/file_name (a safetensors file), fsyncs it, and
// returns the file record and the shard records (file field = `process`), with checksums.
ProcessPart write_shard_file(const std::string& directory, const std::string& file_name,
                             int64_t process, const std::vector<ShardToWrite>& shards,
                             const std::map<std::string, std::string>& metadata,
                             const std::string& function);

// One variable to read: the distinct boxes of this process's devices under the target layout, and
// a buffer for each, allocated and filled by read_targets.
struct ReadTarget {
  std::string entry;
  const VariableRecord* record = nullptr;
  std::vector<Box> boxes;
  std::vector<Device> devices;  // the first local device of each box
  std::vector<Tensor> tensors;  // host memory (the CPU device's own, CPU:0 for other devices)
};

// The distinct local boxes of `layout` for `shape` and, per local device in local order, the
// position of its box. Allocates nothing: the record's sizes are not yet checked against files.
ReadTarget make_read_target(const std::string& entry, const VariableRecord& record,
                            const Layout& layout, std::vector<size_t>* box_of_device);

// The DTensor in `layout` whose local shards are the target's buffers: shared by the CPU devices
// of a box, copied onto each device of any other type (dtensor/host_copy.h on_device).
DTensor assemble(const ReadTarget& target, const Layout& layout,
                 const std::vector<size_t>& box_of_device);

// Fills every target from the checkpoint in `directory`: opens the files the targets need,
// checks their sizes, header checksums and headers against the index, allocates the targets'
// buffers (the records must have passed check_tiling), then reads the byte ranges
// of the saved shards that overlap the targets' boxes (rounded out to checksum blocks) and checks
// every block. Throws IoError naming `function`, the file, the entry and the bytes at fault.
void read_targets(const std::string& directory, const Index& index,
                  std::vector<ReadTarget>& targets, const std::string& function);

}  // namespace dtensor::checkpoint_internal
