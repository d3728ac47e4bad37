// IDX files (the MNIST format) and the MNIST digits as tensors, plus a synthetic stand-in.
//
// An IDX file is a 4-byte magic number (two zero bytes, an element type, the number of dims), one
// big-endian uint32 size per dim, then the elements row-major. Only the unsigned byte type (0x08)
// is supported: MNIST labels are a 1-D array (magic 0x00000801), MNIST images a 3-D array
// [n, rows, cols] (magic 0x00000803). Files may be gzip-compressed or raw; the readers tell them
// apart by content, not by name.
//
// Every file problem throws IoError whose message starts with the function called and names the
// file: a missing or unreadable file, a bad magic number or type, a file shorter than its header
// promises, bytes after the array, images and labels that disagree. Argument mistakes throw
// InvalidArgumentError.
//
// Ownership: results are plain values owning their memory (Tensors on CPU:0, fresh storage).
// Thread-safety: the functions keep no state; they may run concurrently on any files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace dtensor::data {

// The contents of one IDX file of unsigned bytes.
struct IdxArray {
  Shape shape;                // one entry per dim of the header
  std::vector<uint8_t> data;  // num_elements(shape) values, row-major
};

// Reads an IDX file of unsigned bytes, gzip-compressed or raw.
IdxArray read_idx(const std::string& path);

// A slice of MNIST-style examples.
struct MnistSplit {
  Tensor images;  // f32 [n, rows*cols] (784 for MNIST), pixel values / 255, so in [0, 1]
  Tensor labels;  // i32 [n], the byte value of each label (0..9 for MNIST)
};

// Examples [offset, offset + limit) of an images file ([n, rows, cols]) and a labels file ([n]);
// limit -1 means every example from offset on. The files must hold the same number of examples.
// Throws IoError for bad files and InvalidArgumentError for a range outside [0, n].
MnistSplit load_mnist(const std::string& images_path, const std::string& labels_path,
                      int64_t offset = 0, int64_t limit = -1);

// `n` synthetic 28x28 digits, so that examples run without a download. Each class 0..9 is a
// stroke pattern (seven-segment style, with a diagonal for 4 and 7 and a centred 1) drawn with a
// random size, position, slant, stroke width and intensity, plus pixel noise; an MLP learns them
// to well over 90% test accuracy. Labels are balanced: in every block of ten examples (i / 10)
// each class appears once, in a random order. Example i depends only on (seed, i), not on n; a
// built-in generator (not the standard library's distributions) keeps it reproducible across
// runs and toolchains. Throws InvalidArgumentError for n < 0.
MnistSplit synthetic_digits(int64_t n, uint64_t seed);

}  // namespace dtensor::data
