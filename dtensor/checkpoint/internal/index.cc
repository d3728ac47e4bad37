#include "dtensor/checkpoint/internal/index.h"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "dtensor/checkpoint/internal/crc32c.h"
#include "dtensor/checkpoint/internal/safetensors.h"
#include "runtime/error.h"

namespace dtensor::checkpoint_internal {
namespace {

using nlohmann::json;

json file_to_json(const FileRecord& f) {
  return {{"name", f.name},
          {"size", f.size},
          {"data_start", f.data_start},
          {"header_crc32c", f.header_crc32c},
          {"data_crc32c", f.data_crc32c}};
}

FileRecord file_from_json(const json& j) {
  FileRecord f;
  f.name = j.at("name").get<std::string>();
  f.size = j.at("size").get<uint64_t>();
  f.data_start = j.at("data_start").get<uint64_t>();
  f.header_crc32c = j.at("header_crc32c").get<uint32_t>();
  f.data_crc32c = j.at("data_crc32c").get<uint32_t>();
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
  s.file = j.at("file").get<int64_t>();
  s.key = j.at("key").get<std::string>();
  s.box.offset = j.at("offset").get<std::vector<int64_t>>();
  s.box.shape = j.at("shape").get<Shape>();
  const json& offsets = j.at("data_offsets");
  if (offsets.size() != 2) throw std::invalid_argument("data_offsets needs two numbers");
  s.begin = offsets[0].get<uint64_t>();
  s.end = offsets[1].get<uint64_t>();
  s.crc32c = j.at("crc32c").get<std::vector<uint32_t>>();
  return s;
}

json shards_to_json(const std::vector<ShardRecord>& shards) {
  json out = json::array();
  for (const ShardRecord& s : shards) out.push_back(shard_to_json(s));
  return out;
}

std::vector<ShardRecord> shards_from_json(const json& j) {
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
    json j = json::parse(text);
    if (!j.is_object() || j.value("format", "") != kFormatName) {
      throw std::invalid_argument(fmt::format("not a {} file", kFormatName));
    }
    if (j.at("version").get<int64_t>() != kFormatVersion) {
      throw std::invalid_argument(fmt::format("format version {} (this build reads {})",
                                              j.at("version").dump(), kFormatVersion));
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
    const uint32_t stored = j.at("index_crc32c").get<uint32_t>();
    j.erase("index_crc32c");
    const std::string body = j.dump();
    if (crc32c(body.data(), body.size()) != stored) {
      throw std::invalid_argument("checksum mismatch");
    }
    index.save_id = j.at("save_id").get<std::string>();
    index.num_processes = j.at("num_processes").get<int64_t>();
    index.checksum_block_bytes = j.at("checksum_block_bytes").get<uint64_t>();
    if (index.checksum_block_bytes == 0) throw std::invalid_argument("checksum_block_bytes is 0");
    for (const json& f : j.at("files")) index.files.push_back(file_from_json(f));
    for (const auto& [name, v] : j.at("variables").items()) {
      VariableRecord r;
      r.dtype = dtype_from_json(v.at("dtype"));
      r.shape = v.at("shape").get<Shape>();
      r.layout = v.at("layout").get<std::string>();
      r.shards = shards_from_json(v.at("shards"));
      for (const ShardRecord& s : r.shards) {
        if (s.file < 0 || s.file >= static_cast<int64_t>(index.files.size())) {
          throw std::invalid_argument(fmt::format("variable '{}' has a shard in file #{}, of {}",
                                                  name, s.file, index.files.size()));
        }
        if (s.crc32c.size() != num_blocks(s.end - s.begin, index.checksum_block_bytes)) {
          throw std::invalid_argument(
              fmt::format("variable '{}' shard {} has {} checksums", name, s.key, s.crc32c.size()));
        }
      }
      index.variables.emplace(name, std::move(r));
    }
    for (const auto& [name, o] : j.at("optimizers").items()) {
      index.optimizers[name] = {o.at("step").get<int64_t>(),
                                o.at("slots").get<std::vector<std::string>>()};
    }
    for (const auto& [name, d] : j.at("datasets").items()) {
      index.datasets[name] = {d.at("epoch").get<int64_t>(), d.at("batch").get<int64_t>()};
    }
    index.ints = j.at("ints").get<std::map<std::string, int64_t>>();
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
    part.process = j.at("process").get<int64_t>();
    part.file = file_from_json(j.at("file"));
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
  int64_t covered = 0;
  for (size_t i = 0; i < record.shards.size(); ++i) {
    const ShardRecord& s = record.shards[i];
    if (s.box.offset.size() != rank || s.box.shape.size() != rank) {
      bad(fmt::format("shard {} has rank {}, the variable {}", s.key, s.box.shape.size(), rank));
    }
    for (size_t d = 0; d < rank; ++d) {
      if (s.box.offset[d] < 0 || s.box.shape[d] < 0 ||
          s.box.offset[d] + s.box.shape[d] > record.shape[d]) {
        bad(fmt::format("shard {} at [{}] of shape {} lies outside {}", s.key,
                        fmt::join(s.box.offset, ","), shape_to_string(s.box.shape),
                        shape_to_string(record.shape)));
      }
    }
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
    covered += s.box.num_elements();
  }
  if (covered != num_elements(record.shape)) {
    bad(fmt::format("shards cover {} of its {} elements", covered, num_elements(record.shape)));
  }
}

}  // namespace dtensor::checkpoint_internal
