#include "train/checkpoint/test_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace dtensor::checkpoint_testing {

std::string fresh_directory() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(root != nullptr ? root : "/tmp") + "/ckpt_test_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

Tensor random_bits(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937_64 rng(seed);
  auto* bytes = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] &= 1;
  }
  return t;
}

namespace {

void extend(const Mesh& mesh, int64_t rank, std::vector<std::string>& specs, uint32_t used,
            std::vector<Layout>& out) {
  if (static_cast<int64_t>(specs.size()) == rank) {
    out.emplace_back(specs, mesh);
    return;
  }
  specs.push_back(Layout::kUnsharded);
  extend(mesh, rank, specs, used, out);
  specs.pop_back();
  for (int64_t d = 0; d < mesh.rank(); ++d) {
    if (used & (1u << d)) continue;
    specs.push_back(mesh.dims()[d].name);
    extend(mesh, rank, specs, used | (1u << d), out);
    specs.pop_back();
  }
}

}  // namespace

std::vector<Layout> layouts_of(const Mesh& mesh, int64_t rank) {
  std::vector<Layout> out;
  std::vector<std::string> specs;
  extend(mesh, rank, specs, 0, out);
  return out;
}

char byte_at(const std::string& path, uint64_t offset) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  if (!f) throw std::runtime_error("byte_at failed on " + path);
  return c;
}

void overwrite_byte(const std::string& path, uint64_t offset, char value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&value, 1);
  if (!f) throw std::runtime_error("overwrite_byte failed on " + path);
}

void flip_byte(const std::string& path, uint64_t offset) {
  overwrite_byte(path, offset, static_cast<char>(byte_at(path, offset) ^ 0x10));
}

void truncate_file(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
    throw std::runtime_error("truncate failed on " + path);
  }
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("stat failed on " + path);
  return static_cast<uint64_t>(st.st_size);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> list_names(const std::string& directory) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(directory.c_str())) {
    while (const dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace dtensor::checkpoint_testing
