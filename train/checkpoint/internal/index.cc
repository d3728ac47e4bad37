#include "train/checkpoint/internal/index.h"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "runtime/crc32c.h"
#include "runtime/error.h"
#include "train/checkpoint/internal/json_util.h"
#include "train/checkpoint/internal/safetensors.h"

namespace dtensor::checkpoint_internal {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxBlockBytes = uint64_t{1} << 48;

json file_to_json(const FileRecord& f) {
  return {{"name", f.name},
          {"size", f.size},
          {"data_start", f.data_start},
          {"header_crc32c", f.header_crc32c},
          {"data_crc32c", f.data_crc32c}};
}

// True for a name that stays inside the checkpoint directory when joined to it: one path
// component, not "." or "..", no separator or NUL.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
}

FileRecord file_from_json(const json& j, size_t position) {
  FileRecord f;
  f.name = j.at("name").get<std::string>();
  if (!is_plain_file_name(f.name)) {
    throw std::invalid_argument(fmt::format(
        "file #{} is named '{}', which is not a file name inside the checkpoint directory",
        position, f.name));
  }
  f.size = integer_at<uint64_t>(j, "size");
  f.data_start = integer_at<uint64_t>(j, "data_start");
  if (f.data_start < 8 || f.data_start > f.size) {
    throw std::invalid_argument(fmt::format("file #{} '{}' has its data at byte {} of {}", position,
                                            f.name, f.data_start, f.size));
  }
  f.header_crc32c = integer_at<uint32_t>(j, "header_crc32c");
  f.data_crc32c = integer_at<uint32_t>(j, "data_crc32c");
  return f;
}

json shard_to_json(const ShardRecord& s) {
  return {{"file", s.file},
          {"key", s.key},
          {"offset", s.box.offset},
          {"shape", s.box.shape},
          {"data_offsets", {s.begin, s.end}},
          {"crc32c", s.crc32c}};
}

ShardRecord shard_from_json(const json& j) {
  ShardRecord s;
  s.file = integer_at<int64_t>(j, "file", 0);
  s.key = j.at("key").get<std::string>();
  s.box.offset = integer_array<int64_t>(j.at("offset"), "shard " + s.key + " offset", 0);
  s.box.shape = integer_array<int64_t>(j.at("shape"), "shard " + s.key + " shape", 0);
  const std::vector<uint64_t> offsets =
      integer_array<uint64_t>(j.at("data_offsets"), "shard " + s.key + " data_offsets");
  if (offsets.size() != 2) throw std::invalid_argument("data_offsets needs two numbers");
  s.begin = offsets[0];
  s.end = offsets[1];
  if (s.end < s.begin) {
    throw std::invalid_argument(fmt::format(
        "shard {} has data_offsets [{},{}) that end before they begin", s.key, s.begin, s.end));
  }
  s.crc32c = integer_array<uint32_t>(j.at("crc32c"), "shard " + s.key + " crc32c");
  return s;
}

json shards_to_json(const std::vector<ShardRecord>& shards) {
  json out = json::array();
  for (const ShardRecord& s : shards) out.push_back(shard_to_json(s));
  return out;
}

std::vector<ShardRecord> shards_from_json(const json& j) {
  if (!j.is_array()) throw std::invalid_argument("shards must be an array");
  std::vector<ShardRecord> out;
  for (const json& s : j) out.push_back(shard_from_json(s));
  return out;
}

DType dtype_from_json(const json& j) {
  DType dtype;
  if (!parse_safetensors_dtype(j.get<std::string>(), &dtype)) {
    throw std::invalid_argument("unknown dtype " + j.dump());
  }
  return dtype;
}

// Parses `text`, checks the format tag and runs `body` on the object, turning every JSON or
// structural error into IoError.
template <typename Body>
void parse_checked(const std::string& text, const std::string& path, const std::string& function,
                   const char* what, Body&& body) {
  try {
    json j = parse_untrusted_json(text);
    if (!j.is_object() || !j.contains("format") || j["format"] != kFormatName) {
      throw std::invalid_argument(fmt::format("not a {} file", kFormatName));
    }
    const int64_t version = integer_at<int64_t>(j, "version");
    if (version != kFormatVersion) {
      throw std::invalid_argument(
          fmt::format("format version {} (this build reads {})", version, kFormatVersion));
    }
    body(j);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw_error<IoError>(function, "corrupt {} {}: {}", what, path, e.what());
  }
}

}  // namespace

std::string encode_index(const Index& index) {
  json j;
  j["format"] = kFormatName;
  j["version"] = kFormatVersion;
  j["save_id"] = index.save_id;
  j["num_processes"] = index.num_processes;
  j["checksum_block_bytes"] = index.checksum_block_bytes;
  j["files"] = json::array();
  for (const FileRecord& f : index.files) j["files"].push_back(file_to_json(f));
  j["variables"] = json::object();
  for (const auto& [name, v] : index.variables) {
    j["variables"][name] = {{"dtype", safetensors_dtype(v.dtype)},
                            {"shape", v.shape},
                            {"layout", v.layout},
                            {"shards", shards_to_json(v.shards)}};
  }
  j["optimizers"] = json::object();
  for (const auto& [name, o] : index.optimizers) {
    j["optimizers"][name] = {{"step", o.step}, {"slots", o.slots}};
  }
  j["datasets"] = json::object();
  for (const auto& [name, d] : index.datasets) {
    j["datasets"][name] = {{"epoch", d.epoch}, {"batch", d.batch}};
  }
  j["ints"] = index.ints;
  const std::string body = j.dump();
  j["index_crc32c"] = crc32c(body.data(), body.size());
  return j.dump() + "\n";
}

Index decode_index(const std::string& text, const std::string& path, const std::string& function) {
  Index index;
  parse_checked(text, path, function, "index", [&](json& j) {
    const uint32_t stored = integer_at<uint32_t>(j, "index_crc32c");
    j.erase("index_crc32c");
    const std::string body = j.dump();
    if (crc32c(body.data(), body.size()) != stored) {
      throw std::invalid_argument("checksum mismatch");
    }
    index.save_id = j.at("save_id").get<std::string>();
    index.num_processes = integer_at<int64_t>(j, "num_processes", 1);
    // Bounded so that rounding byte ranges out to blocks cannot wrap around.
    index.checksum_block_bytes =
        checked_unsigned(j.at("checksum_block_bytes"), "checksum_block_bytes", kMaxBlockBytes);
    if (index.checksum_block_bytes == 0) throw std::invalid_argument("checksum_block_bytes is 0");
    const json& files = j.at("files");
    if (!files.is_array()) throw std::invalid_argument("files must be an array");
    for (const json& f : files) index.files.push_back(file_from_json(f, index.files.size()));
    for (const auto& [name, v] : j.at("variables").items()) {
      VariableRecord r;
      r.dtype = dtype_from_json(v.at("dtype"));
      r.shape = integer_array<int64_t>(v.at("shape"), "variable '" + name + "' shape", 0);
      r.layout = v.at("layout").get<std::string>();
      r.shards = shards_from_json(v.at("shards"));
      for (const ShardRecord& s : r.shards) {
        if (s.file < 0 || s.file >= static_cast<int64_t>(index.files.size())) {
          throw std::invalid_argument(fmt::format("variable '{}' has a shard in file #{}, of {}",
                                                  name, s.file, index.files.size()));
        }
        // The bytes must lie in the file's data section: sizes are checked against the file
        // before anything is allocated, so no claim of the index sizes an allocation alone.
        const FileRecord& file = index.files[static_cast<size_t>(s.file)];
        if (s.end > file.size - file.data_start) {
          throw std::invalid_argument(fmt::format(
              "variable '{}' shard {} spans bytes [{},{}) of the data of {}, which has {}", name,
              s.key, s.begin, s.end, file.name, file.size - file.data_start));
        }
        if (s.crc32c.size() != num_blocks(s.end - s.begin, index.checksum_block_bytes)) {
          throw std::invalid_argument(
              fmt::format("variable '{}' shard {} has {} checksums", name, s.key, s.crc32c.size()));
        }
      }
      index.variables.emplace(name, std::move(r));
    }
    for (const auto& [name, o] : j.at("optimizers").items()) {
      index.optimizers[name] = {
          integer_value<int64_t>(o.at("step"), "optimizer '" + name + "' step", 0),
          o.at("slots").get<std::vector<std::string>>()};
    }
    for (const auto& [name, d] : j.at("datasets").items()) {
      index.datasets[name] = {
          integer_value<int64_t>(d.at("epoch"), "dataset '" + name + "' epoch"),
          integer_value<int64_t>(d.at("batch"), "dataset '" + name + "' batch")};
    }
    for (const auto& [name, value] : j.at("ints").items()) {
      index.ints[name] = integer_value<int64_t>(value, "integer '" + name + "'");
    }
  });
  return index;
}

std::string encode_part(const ProcessPart& part) {
  json j;
  j["format"] = kFormatName;
  j["version"] = kFormatVersion;
  j["process"] = part.process;
  j["file"] = file_to_json(part.file);
  j["shards"] = json::object();
  for (const auto& [name, shards] : part.shards) j["shards"][name] = shards_to_json(shards);
  return j.dump() + "\n";
}

ProcessPart decode_part(const std::string& text, const std::string& path,
                        const std::string& function) {
  ProcessPart part;
  parse_checked(text, path, function, "process metadata", [&](json& j) {
    part.process = integer_at<int64_t>(j, "process", 0);
    part.file = file_from_json(j.at("file"), static_cast<size_t>(part.process));
    for (const auto& [name, shards] : j.at("shards").items()) {
      part.shards[name] = shards_from_json(shards);
    }
  });
  return part;
}

void check_tiling(const std::string& name, const VariableRecord& record, const std::string& path,
                  const std::string& function) {
  auto bad = [&](const std::string& why) {
    throw_error<IoError>(function, "corrupt index {}: variable '{}' {}", path, name, why);
  };
  const size_t rank = record.shape.size();
  // Checked arithmetic throughout: the index is untrusted, and a wrapped sum or product would let
  // a partial tiling pass (and a restore leave part of a variable unwritten).
  const int64_t total = checked_num_elements(record.shape);
  if (total < 0 || checked_num_bytes(record.shape, dtype_size(record.dtype)) < 0) {
    bad(fmt::format("has shape {}, more than 2^63 bytes", shape_to_string(record.shape)));
  }
  int64_t covered = 0;
  for (size_t i = 0; i < record.shards.size(); ++i) {
    const ShardRecord& s = record.shards[i];
    if (s.box.offset.size() != rank || s.box.shape.size() != rank) {
      bad(fmt::format("shard {} has rank {}, the variable {}", s.key, s.box.shape.size(), rank));
    }
    for (size_t d = 0; d < rank; ++d) {
      int64_t end = 0;
      if (s.box.offset[d] < 0 || s.box.shape[d] < 0 ||
          __builtin_add_overflow(s.box.offset[d], s.box.shape[d], &end) || end > record.shape[d]) {
        bad(fmt::format("shard {} at [{}] of shape {} lies outside {}", s.key,
                        fmt::join(s.box.offset, ","), shape_to_string(s.box.shape),
                        shape_to_string(record.shape)));
      }
    }
    // Inside the variable, so no product below exceeds the variable's, checked above.
    const uint64_t bytes = static_cast<uint64_t>(s.box.num_elements()) * dtype_size(record.dtype);
    if (s.end < s.begin || s.end - s.begin != bytes) {
      bad(fmt::format("shard {} spans bytes [{},{}) for {} bytes of data", s.key, s.begin, s.end,
                      bytes));
    }
    for (size_t k = 0; k < i; ++k) {
      if (intersect(s.box, record.shards[k].box)) {
        bad(fmt::format("shards {} and {} overlap", record.shards[k].key, s.key));
      }
    }
    // Disjoint boxes inside the variable: their sum cannot exceed its total, nor overflow.
    covered += s.box.num_elements();
  }
  // Inside, pairwise disjoint and as many elements as the variable: every element is covered.
  if (covered != total) {
    bad(fmt::format("shards cover {} of its {} elements", covered, total));
  }
}

}  // namespace dtensor::checkpoint_internal
