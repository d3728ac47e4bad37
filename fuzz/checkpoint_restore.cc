// Fuzzes a whole Checkpoint::restore into a small model (two variables on a 2x2 mesh, Adam over
// both, a dataset and an integer).
//
// Input: a flags byte, the text of index.json up to the first NUL byte, then the bytes of the one
// shard file. Flags ask the harness to repair what a mutation almost always breaks, so that the
// fuzzer reaches the checks behind the checksums: bit 0 reseals index_crc32c, bit 1 sets file #0's
// size, data_start and checksums from the file, bit 2 recomputes every shard's block checksums.
//
// Property (all-or-nothing): the restore either throws a dtensor::Error and leaves every tracked
// object exactly as it was, or succeeds and every variable and slot holds the bytes the index
// places there, checked against an independent element-by-element assembly of the file.
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "fuzz/harness.h"
#include "runtime/crc32c.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/internal/index.h"
#include "train/checkpoint/internal/json_util.h"
#include "train/checkpoint/internal/safetensors.h"

namespace {

using namespace dtensor;
using namespace dtensor::checkpoint_internal;
using nlohmann::json;

const char* const kShardFile = "shards-00000-of-00001.safetensors";

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

uint64_t as_u64(const json& j) { return j.is_number_unsigned() ? j.get<uint64_t>() : ~uint64_t{0}; }

// Applies the repairs the flags ask for to the parsed index.
void repair(json& j, const std::string& file, uint8_t flags) {
  if ((flags & 2) && j.contains("files") && j["files"].is_array() && !j["files"].empty() &&
      j["files"][0].is_object() && file.size() >= 8) {
    json& f = j["files"][0];
    const uint64_t data_start = 8 + decode_header_length(file.data());
    f["name"] = kShardFile;
    f["size"] = file.size();
    if (data_start <= file.size()) {
      f["data_start"] = data_start;
      f["header_crc32c"] = crc32c(file.data(), data_start);
      f["data_crc32c"] = crc32c(file.data() + data_start, file.size() - data_start);
    }
  }
  if ((flags & 4) && j.contains("variables") && j["variables"].is_object() && j.contains("files") &&
      j["files"].is_array() && !j["files"].empty() && j["files"][0].is_object() &&
      j["files"][0].contains("data_start")) {
    const uint64_t data_start = as_u64(j["files"][0]["data_start"]);
    const uint64_t block =
        j.contains("checksum_block_bytes") ? as_u64(j["checksum_block_bytes"]) : 0;
    if (block == 0 || block > (uint64_t{1} << 30) || data_start > file.size()) return;
    for (auto& [name, v] : j["variables"].items()) {
      if (!v.is_object() || !v.contains("shards") || !v["shards"].is_array()) continue;
      for (json& s : v["shards"]) {
        if (!s.is_object() || !s.contains("data_offsets") || !s["data_offsets"].is_array() ||
            s["data_offsets"].size() != 2) {
          continue;
        }
        const uint64_t begin = as_u64(s["data_offsets"][0]), end = as_u64(s["data_offsets"][1]);
        if (begin > end || end > file.size() - data_start) continue;
        json crcs = json::array();
        for (uint64_t lo = begin; lo < end; lo += block) {
          crcs.push_back(crc32c(file.data() + data_start + lo, std::min(block, end - lo)));
        }
        s["crc32c"] = crcs;
      }
    }
  }
  if (flags & 1) {
    j.erase("index_crc32c");
    const std::string body = j.dump();
    j["index_crc32c"] = crc32c(body.data(), body.size());
  }
}

// The model restored into; fresh for every input so that a partial restore cannot hide.
struct Model {
  Mesh mesh = Mesh::create({{"batch", 2}, {"model", 2}}, DeviceType::kCPU);
  DVariable kernel{random_uniform({6, 5}, Layout({"unsharded", "model"}, mesh), 11),
                   "dense/kernel"};
  DVariable bias{random_uniform({5}, Layout::replicated(mesh, 1), 12), "dense/bias"};
  Adam adam{0.01};
  data::Dataset train{Tensor::zeros({20, 2}, DType::kF32), Tensor::zeros({20}, DType::kI32), mesh,
                      "batch"};
  int64_t epoch = -1;
  Checkpoint checkpoint;

  Model() {
    adam.set_step(42);
    train.batch(4).repeat();
    train.next();
    checkpoint.add_variable("dense/kernel", kernel);
    checkpoint.add_variable("dense/bias", bias);
    checkpoint.add_optimizer("adam", adam, {kernel, bias});
    checkpoint.add_dataset("train", train);
    checkpoint.add_int("epoch", &epoch);
  }

  // Every tracked tensor by checkpoint entry name.
  std::vector<std::pair<std::string, DVariable>> tensors() const {
    std::vector<std::pair<std::string, DVariable>> out = {{"dense/kernel", kernel},
                                                          {"dense/bias", bias}};
    for (const auto& [slot, var] : adam.slots()) out.emplace_back("adam/" + slot, var);
    return out;
  }
  struct State {
    std::vector<Tensor> values;
    int64_t step, epoch;
    data::Dataset::State position;
  };
  State state() const {
    State s{{}, adam.step(), epoch, train.state()};
    for (const auto& [name, var] : tensors()) s.values.push_back(to_global(var.value()));
    return s;
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// The global value of `record` assembled element by element from the shard file: an independent
// check of the tiling and copy code under restore.
// Every file record names the one file the harness writes (any other name fails to open).
std::string reference_bytes(const Index& index, const VariableRecord& record,
                            const std::string& file) {
  const size_t element = dtype_size(record.dtype);
  const Shape& shape = record.shape;
  std::string out(static_cast<size_t>(num_elements(shape)) * element, '\0');
  std::vector<bool> written(static_cast<size_t>(num_elements(shape)), false);
  for (const ShardRecord& s : record.shards) {
    const uint64_t data_start = index.files.at(static_cast<size_t>(s.file)).data_start;
    const int64_t n = s.box.num_elements();
    for (int64_t i = 0; i < n; ++i) {
      // Row-major position i of the shard -> global linear index.
      int64_t rest = i, global = 0, stride = 1;
      for (size_t d = shape.size(); d-- > 0;) {
        const int64_t coord = s.box.offset[d] + rest % s.box.shape[d];
        rest /= s.box.shape[d];
        global += coord * stride;
        stride *= shape[d];
      }
      if (written[static_cast<size_t>(global)]) fuzz::finding("restored from overlapping shards");
      written[static_cast<size_t>(global)] = true;
      std::memcpy(&out[static_cast<size_t>(global) * element],
                  file.data() + data_start + s.begin + static_cast<uint64_t>(i) * element, element);
    }
  }
  for (bool w : written) {
    if (!w) fuzz::finding("a restore succeeded with elements no shard covers");
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = rest.find('\0');
  std::string index_text = rest.substr(0, nul);
  const std::string file = nul == std::string::npos ? "" : rest.substr(nul + 1);

  try {
    json j = parse_untrusted_json(index_text);
    if (j.is_object()) {
      repair(j, file, flags);
      index_text = j.dump();
    }
  } catch (const std::exception&) {
    // Not JSON: written as it is, for the reader to refuse.
  }
  const std::string dir = fuzz::scratch_directory() + "/ckpt";
  ::mkdir(dir.c_str(), 0755);
  write_file(dir + "/index.json", index_text);
  write_file(dir + "/" + kShardFile, file);

  Model model;
  const Model::State before = model.state();
  try {
    model.checkpoint.restore(dir);
  } catch (const Error&) {
    const Model::State after = model.state();
    for (size_t i = 0; i < before.values.size(); ++i) {
      if (!same_bytes(before.values[i], after.values[i])) {
        fuzz::finding("a failed restore changed " + model.tensors()[i].first);
      }
    }
    if (after.step != before.step || after.epoch != before.epoch ||
        !(after.position == before.position)) {
      fuzz::finding("a failed restore changed the step, the integer or the dataset");
    }
    return 0;
  }
  // Succeeded: every tensor must hold exactly what the index places there.
  const Index index = decode_index(index_text, "fuzz", "fuzz");
  for (const auto& [name, var] : model.tensors()) {
    const std::string expected = reference_bytes(index, index.variables.at(name), file);
    const Tensor value = to_global(var.value());
    if (expected.size() != value.nbytes() ||
        std::memcmp(expected.data(), value.raw_data(), expected.size()) != 0) {
      fuzz::finding("a successful restore left " + name + " different from its shards");
    }
  }
  if (model.adam.step() != index.optimizers.at("adam").step ||
      model.epoch != index.ints.at("epoch")) {
    fuzz::finding("a successful restore did not set the step or the integer");
  }
  return 0;
}
