// Writes seed inputs for the checkpoint fuzz targets into the directory given as argument, from a
// checkpoint the library saves of the model checkpoint_restore.cc restores into:
//   checkpoint_restore/seed-<flags>  (flags byte, index.json, NUL, the shard file)
//   index_json/seed-index            (index.json)
//   safetensors_header/seed-header   (the JSON of the shard file's header)
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <string>

#include "dtensor/creation.h"
#include "train/checkpoint/checkpoint.h"

using namespace dtensor;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string out = argv[1];
  Mesh mesh = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  DVariable kernel(random_uniform({6, 5}, Layout::batch_sharded(mesh, "batch", 2), 1),
                   "dense/kernel");
  DVariable bias(random_uniform({5}, Layout::batch_sharded(mesh, "batch", 1), 2), "dense/bias");
  Adam adam(0.01);
  adam.apply({kernel, bias}, {random_uniform({6, 5}, Layout::replicated(mesh, 2), 3),
                              random_uniform({5}, Layout::replicated(mesh, 1), 4)});
  data::Dataset train(Tensor::zeros({20, 2}, DType::kF32), Tensor::zeros({20}, DType::kI32), mesh,
                      "batch");
  train.batch(4).repeat();
  train.next();
  int64_t epoch = 3;
  Checkpoint c;
  c.add_variable("dense/kernel", kernel);
  c.add_variable("dense/bias", bias);
  c.add_optimizer("adam", adam);
  c.add_dataset("train", train);
  c.add_int("epoch", &epoch);
  const std::string dir = out + "/ckpt";
  c.save(dir);
  const std::string index = read(dir + "/index.json");
  const std::string file = read(dir + "/shards-00000-of-00001.safetensors");
  for (const char* sub : {"/checkpoint_restore", "/index_json", "/safetensors_header"}) {
    ::mkdir((out + sub).c_str(), 0755);
  }
  for (int flags : {0, 7}) {
    write(out + "/checkpoint_restore/seed-" + std::to_string(flags),
          std::string(1, static_cast<char>(flags)) + index + std::string(1, '\0') + file);
  }
  write(out + "/index_json/seed-index", index);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  write(out + "/safetensors_header/seed-header", file.substr(8, n));
  return 0;
}
