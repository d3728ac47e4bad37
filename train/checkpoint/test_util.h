// Helpers for the checkpoint tests: fresh directories, tensors whose every bit matters, and
// damage to files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::checkpoint_testing {

// A new empty directory under $TEST_TMPDIR (or /tmp).
std::string fresh_directory();

// A tensor of random bytes (floats include NaN payloads and denormals; bools are 0 or 1).
Tensor random_bits(const Shape& shape, DType dtype, uint64_t seed);

// Every layout of `rank` on `mesh` without partial dims: each tensor dim unsharded or on a
// distinct mesh dim.
std::vector<Layout> layouts_of(const Mesh& mesh, int64_t rank);

// Reads, modifies and writes files in place.
void flip_byte(const std::string& path, uint64_t offset);
void overwrite_byte(const std::string& path, uint64_t offset, char value);
char byte_at(const std::string& path, uint64_t offset);
void truncate_file(const std::string& path, uint64_t size);
uint64_t file_size(const std::string& path);
std::string read_text(const std::string& path);
// Names in a directory, sorted.
std::vector<std::string> list_names(const std::string& directory);

}  // namespace dtensor::checkpoint_testing
