#include "train/checkpoint/internal/shard_io.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include "dtensor/host_copy.h"
#include "runtime/buffer_pool.h"
#include "runtime/crc32c.h"
#include "runtime/thread_pool.h"
#include "train/checkpoint/internal/file_io.h"
#include "train/checkpoint/internal/safetensors.h"

namespace dtensor::checkpoint_internal {
namespace {

// Blocks one task of the pool writes or reads: large enough to amortise the hand-off, small
// enough to balance 2-16 threads over a few hundred MB.
constexpr uint64_t kBlocksPerTask = 8;

std::string shard_key(const std::string& entry, const Box& box) {
  return fmt::format("{}@{}", entry, fmt::join(box.offset, ","));
}

// Where a target's bytes are read to: the device itself for a CPU device; host memory for any
// other, whose shards assemble() then copies onto each device.
Device staging_device(const Device& device) {
  return device.type == DeviceType::kCPU ? device : Device{DeviceType::kCPU, 0};
}

}  // namespace

std::vector<ShardToWrite> shards_to_write(const std::string& entry, const DTensor& value) {
  const Layout& layout = value.layout();
  const Mesh& mesh = layout.mesh();
  const MeshDimMask unsharded = ~layout.sharded_mask();
  const std::vector<int64_t>& local = mesh.local_device_ids();
  std::vector<ShardToWrite> out;
  for (size_t i = 0; i < local.size(); ++i) {
    const int64_t device = local[i];
    bool lowest_holder = true;
    for (int64_t k = 0; k < mesh.rank(); ++k) {
      if (((unsharded >> k) & 1) && mesh.coord(device, k) != 0) lowest_holder = false;
    }
    if (!lowest_holder) continue;
    Box box{layout.shard_offset(value.shape(), device), layout.shard_shape(value.shape(), device)};
    if (box.empty()) continue;
    std::string key = shard_key(entry, box);
    out.push_back(
        {entry, std::move(key), std::move(box), value.dtype(), host_readable(value.shard(i))});
  }
  return out;
}

ProcessPart write_shard_file(const std::string& directory, const std::string& file_name,
                             int64_t process, const std::vector<ShardToWrite>& shards,
                             const std::map<std::string, std::string>& metadata,
                             const std::string& function) {
  std::vector<SafetensorsEntry> entries;
  uint64_t data_size = 0;
  for (const ShardToWrite& s : shards) {
    const uint64_t bytes = s.data.nbytes();
    entries.push_back({s.key, s.dtype, s.box.shape, data_size, data_size + bytes});
    data_size += bytes;
  }
  const std::string header = encode_safetensors_header(entries, metadata);
  const uint64_t data_start = header.size();

  File file = File::create(join_path(directory, file_name), function);
  file.pwrite_all(header.data(), header.size(), 0);

  struct Task {
    size_t shard;
    uint64_t first_block;
    uint64_t end_block;
  };
  std::vector<Task> tasks;
  std::vector<std::vector<uint32_t>> crcs(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const uint64_t blocks = num_blocks(shards[i].data.nbytes(), kChecksumBlockBytes);
    crcs[i].resize(blocks);
    for (uint64_t b = 0; b < blocks; b += kBlocksPerTask) {
      tasks.push_back({i, b, std::min(blocks, b + kBlocksPerTask)});
    }
  }
  // Each block is checksummed and written while it is still in cache.
  ThreadPool::global().parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
    const Task& task = tasks[static_cast<size_t>(t)];
    const ShardToWrite& s = shards[task.shard];
    const char* base = static_cast<const char*>(s.data.raw_data());
    const uint64_t bytes = s.data.nbytes();
    for (uint64_t b = task.first_block; b < task.end_block; ++b) {
      const uint64_t lo = b * kChecksumBlockBytes;
      const uint64_t n = std::min(kChecksumBlockBytes, bytes - lo);
      crcs[task.shard][b] = crc32c(base + lo, n);
      file.pwrite_all(base + lo, n, data_start + entries[task.shard].begin + lo);
    }
  });
  file.sync();
  file.close();

  ProcessPart part;
  part.process = process;
  part.file.name = file_name;
  part.file.size = data_start + data_size;
  part.file.data_start = data_start;
  part.file.header_crc32c = crc32c(header.data(), header.size());
  uint32_t data_crc = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const uint64_t bytes = shards[i].data.nbytes();
    for (size_t b = 0; b < crcs[i].size(); ++b) {
      data_crc = crc32c_combine(data_crc, crcs[i][b],
                                std::min(kChecksumBlockBytes, bytes - b * kChecksumBlockBytes));
    }
    ShardRecord record;
    record.file = process;
    record.key = shards[i].key;
    record.box = shards[i].box;
    record.begin = entries[i].begin;
    record.end = entries[i].end;
    record.crc32c = std::move(crcs[i]);
    part.shards[shards[i].entry].push_back(std::move(record));
  }
  part.file.data_crc32c = data_crc;
  return part;
}

ReadTarget make_read_target(const std::string& entry, const VariableRecord& record,
                            const Layout& layout, std::vector<size_t>* box_of_device) {
  ReadTarget target;
  target.entry = entry;
  target.record = &record;
  const Mesh& mesh = layout.mesh();
  std::map<Box, size_t> seen;
  box_of_device->clear();
  for (int64_t device : mesh.local_device_ids()) {
    Box box{layout.shard_offset(record.shape, device), layout.shard_shape(record.shape, device)};
    auto [it, inserted] = seen.emplace(box, target.boxes.size());
    if (inserted) {
      target.devices.push_back(mesh_device(mesh, device));
      target.boxes.push_back(std::move(box));
    }
    box_of_device->push_back(it->second);
  }
  return target;
}

DTensor assemble(const ReadTarget& target, const Layout& layout,
                 const std::vector<size_t>& box_of_device) {
  const Mesh& mesh = layout.mesh();
  const std::vector<int64_t>& local = mesh.local_device_ids();
  std::vector<Tensor> shards;
  shards.reserve(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    shards.push_back(on_device(target.tensors[box_of_device[i]], mesh_device(mesh, local[i])));
  }
  return DTensor::from_trusted_shards(target.record->shape, target.record->dtype, layout,
                                      std::move(shards));
}

namespace {

struct Piece {
  size_t box;
  Box region;
};

// A run of checksum blocks [lo, hi) (bytes, relative to the shard's data) of one saved shard.
// Direct jobs read straight into a target buffer; the others read into a scratch buffer and copy
// the pieces out.
struct Job {
  size_t target;
  const ShardRecord* shard;
  uint64_t lo, hi;
  char* direct = nullptr;
  std::vector<Piece> pieces;
};

std::vector<Job> plan_jobs(std::vector<ReadTarget>& targets, uint64_t block_bytes) {
  std::vector<Job> jobs;
  for (size_t t = 0; t < targets.size(); ++t) {
    ReadTarget& target = targets[t];
    const uint64_t element = dtype_size(target.record->dtype);
    for (const ShardRecord& shard : target.record->shards) {
      std::vector<Piece> pieces;
      for (size_t b = 0; b < target.boxes.size(); ++b) {
        if (auto region = intersect(shard.box, target.boxes[b])) pieces.push_back({b, *region});
      }
      if (pieces.empty()) continue;
      const uint64_t bytes = shard.end - shard.begin;
      const Box& first_box = target.boxes[pieces[0].box];
      if (pieces.size() == 1 && pieces[0].region == shard.box &&
          is_contiguous_in(first_box, shard.box)) {
        char* dst = static_cast<char*>(target.tensors[pieces[0].box].raw_data()) +
                    linear_index(first_box, shard.box.offset) * element;
        const uint64_t step = kBlocksPerTask * block_bytes;
        for (uint64_t lo = 0; lo < bytes; lo += step) {
          jobs.push_back({t, &shard, lo, std::min(bytes, lo + step), dst + lo, {}});
        }
        continue;
      }
      uint64_t lo = bytes, hi = 0;
      for (const Piece& p : pieces) {
        auto [first, last] = covering_range(shard.box, p.region);
        lo = std::min(lo, first * element);
        hi = std::max(hi, last * element);
      }
      lo = lo / block_bytes * block_bytes;
      hi = std::min(bytes, (hi + block_bytes - 1) / block_bytes * block_bytes);
      jobs.push_back({t, &shard, lo, hi, nullptr, std::move(pieces)});
    }
  }
  return jobs;
}

}  // namespace

void read_targets(const std::string& directory, const Index& index,
                  std::vector<ReadTarget>& targets, const std::string& function) {
  const uint64_t block_bytes = index.checksum_block_bytes;

  // The files holding shards that overlap the targets, checked before any buffer is allocated:
  // the index's sizes are then the files' sizes, which bound every shard and so every buffer.
  std::vector<bool> needed(index.files.size(), false);
  for (const ReadTarget& target : targets) {
    for (const ShardRecord& shard : target.record->shards) {
      for (const Box& box : target.boxes) {
        if (intersect(shard.box, box)) needed[static_cast<size_t>(shard.file)] = true;
      }
    }
  }
  std::vector<std::optional<File>> files(index.files.size());
  for (size_t f = 0; f < files.size(); ++f) {
    if (!needed[f]) continue;
    const FileRecord& record = index.files[f];
    const std::string path = join_path(directory, record.name);
    File file = File::open_read(path, function);
    const uint64_t size = file.size();
    if (size != record.size) {
      throw_error<IoError>(function, "{} has {} bytes but the index records {} ({})", path, size,
                           record.size, size < record.size ? "truncated" : "grown since");
    }
    if (record.data_start < 8 || record.data_start > size) {
      throw_error<IoError>(function, "corrupt index: {} has its data at byte {} of {}", path,
                           record.data_start, size);
    }
    std::string header(record.data_start, '\0');
    file.pread_all(header.data(), header.size(), 0);
    if (crc32c(header.data(), header.size()) != record.header_crc32c) {
      throw_error<IoError>(function, "checksum mismatch in the header of {}", path);
    }
    if (decode_header_length(header.data()) != record.data_start - 8) {
      throw_error<IoError>(function, "{} has a header of {} bytes, the index says {}", path,
                           decode_header_length(header.data()), record.data_start - 8);
    }
    SafetensorsHeader parsed =
        decode_safetensors_header(std::string_view(header).substr(8), path, function);
    std::map<std::string, const SafetensorsEntry*> by_key;
    for (const SafetensorsEntry& e : parsed.entries) by_key[e.key] = &e;
    for (const ReadTarget& target : targets) {
      for (const ShardRecord& shard : target.record->shards) {
        if (static_cast<size_t>(shard.file) != f) continue;
        auto it = by_key.find(shard.key);
        if (it == by_key.end() || it->second->dtype != target.record->dtype ||
            it->second->shape != shard.box.shape || it->second->begin != shard.begin ||
            it->second->end != shard.end) {
          throw_error<IoError>(function, "{} does not hold tensor '{}' as the index describes it",
                               path, shard.key);
        }
      }
    }
    files[f].emplace(std::move(file));
  }
  for (ReadTarget& target : targets) {
    target.tensors.clear();
    for (size_t b = 0; b < target.boxes.size(); ++b) {
      target.tensors.push_back(Tensor::empty(target.boxes[b].shape, target.record->dtype,
                                             staging_device(target.devices[b])));
    }
  }
  std::vector<Job> jobs = plan_jobs(targets, block_bytes);

  ThreadPool::global().parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t j) {
    const Job& job = jobs[static_cast<size_t>(j)];
    const ShardRecord& shard = *job.shard;
    const FileRecord& record = index.files[shard.file];
    const File& file = *files[shard.file];
    std::shared_ptr<Storage> scratch;  // pooled: resharding restores reuse these buffers
    char* buffer = job.direct;
    if (buffer == nullptr) {
      scratch = BufferPool::global().acquire(job.hi - job.lo);
      buffer = static_cast<char*>(scratch->data());
    }
    for (uint64_t lo = job.lo; lo < job.hi; lo += block_bytes) {
      const uint64_t n = std::min(block_bytes, job.hi - lo);
      char* dst = buffer + (lo - job.lo);
      file.pread_all(dst, n, record.data_start + shard.begin + lo);
      const uint64_t block = lo / block_bytes;
      if (crc32c(dst, n) != shard.crc32c[block]) {
        throw_error<IoError>(function,
                             "checksum mismatch in {}: variable '{}' shard {}, bytes [{},{}) of "
                             "the shard (block {} of {})",
                             join_path(directory, record.name), targets[job.target].entry,
                             shard.key, lo, lo + n, block, shard.crc32c.size());
      }
    }
    if (job.direct != nullptr) return;
    ReadTarget& target = targets[job.target];
    const uint64_t element = dtype_size(target.record->dtype);
    for (const Piece& p : job.pieces) {
      copy_region(buffer, shard.box, job.lo / element,
                  static_cast<char*>(target.tensors[p.box].raw_data()), target.boxes[p.box],
                  p.region, element);
    }
  });
}

}  // namespace dtensor::checkpoint_internal
