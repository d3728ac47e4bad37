// The checkpoint index (index.json): what a checkpoint holds and where every byte of it lies, and
// the per-process parts (shards-<p>-of-<P>.json) that process 0 merges into it.
//
//   {"format": "dtensor-checkpoint", "version": 1, "save_id": "<hex>", "num_processes": 1,
//    "checksum_block_bytes": 1048576,
//    "files": [{"name": "shards-00000-of-00001.safetensors", "size": 12345, "data_start": 512,
//               "header_crc32c": 123, "data_crc32c": 456}],
//    "variables": {"dense/kernel": {"dtype": "F32", "shape": [784, 700], "layout": "<text>",
//        "shards": [{"file": 0, "key": "dense/kernel@0,0", "offset": [0, 0], "shape": [98, 700],
//                    "data_offsets": [0, 274400], "crc32c": [<one per block of the shard>]}]}},
//    "optimizers": {"opt": {"step": 2, "slots": ["opt/dense/kernel/m", ...]}},
//    "datasets": {"train": {"epoch": 0, "batch": 3}},
//    "ints": {"epoch": 1},
//    "index_crc32c": <CRC-32C of this object's compact dump without this field>}
//
// Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "train/checkpoint/internal/boxes.h"

namespace dtensor::checkpoint_internal {

inline constexpr const char* kFormatName = "dtensor-checkpoint";
inline constexpr int64_t kFormatVersion = 1;
inline constexpr const char* kIndexFile = "index.json";

struct ShardRecord {
  int64_t file = 0;    // position in Index::files
  std::string key;     // tensor key in that safetensors file
  Box box;             // where the shard sits in the global tensor
  uint64_t begin = 0;  // data_offsets, relative to the file's data section
  uint64_t end = 0;
  std::vector<uint32_t> crc32c;  // per checksum block of [begin, end)
};

struct VariableRecord {
  DType dtype = DType::kF32;
  Shape shape;
  std::string layout;  // the layout it was saved from, for people (restore does not need it)
  std::vector<ShardRecord> shards;
};

struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  uint64_t size = 0;
  uint64_t data_start = 0;     // 8 + header length
  uint32_t header_crc32c = 0;  // of bytes [0, data_start)
  uint32_t data_crc32c = 0;    // of bytes [data_start, size)
};

struct OptimizerRecord {
  int64_t step = 0;
  std::vector<std::string> slots;  // entry names in Index::variables
};

struct DatasetRecord {
  int64_t epoch = 0;
  int64_t batch = 0;
};

struct Index {
  std::string save_id;
  int64_t num_processes = 1;
  uint64_t checksum_block_bytes = 0;
  std::vector<FileRecord> files;
  std::map<std::string, VariableRecord> variables;
  std::map<std::string, OptimizerRecord> optimizers;
  std::map<std::string, DatasetRecord> datasets;
  std::map<std::string, int64_t> ints;
};

// What one process wrote: its file and the shards in it (file fields of the records are the
// process index).
struct ProcessPart {
  int64_t process = 0;
  FileRecord file;
  std::map<std::string, std::vector<ShardRecord>> shards;  // by variable entry name
};

std::string encode_index(const Index& index);
// Parses, checks index_crc32c and the structure. Throws IoError("[function] corrupt index
// <path>: ...").
Index decode_index(const std::string& text, const std::string& path, const std::string& function);

std::string encode_part(const ProcessPart& part);
ProcessPart decode_part(const std::string& text, const std::string& path,
                        const std::string& function);

// Throws IoError unless the shards of `record` tile its global shape exactly (inside it, no
// overlaps, every element covered) and their byte ranges match their shapes.
void check_tiling(const std::string& name, const VariableRecord& record, const std::string& path,
                  const std::string& function);

// Number of checksum blocks of a byte range of length n.
inline uint64_t num_blocks(uint64_t n, uint64_t block_bytes) {
  return (n + block_bytes - 1) / block_bytes;
}

}  // namespace dtensor::checkpoint_internal
