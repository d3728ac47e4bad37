// IDX files (the MNIST format) and the MNIST digits as tensors, plus a synthetic stand-in.
//
// An IDX file is a 4-byte magic number (two zero bytes, an element type, the number of dims), one
// big-endian uint32 size per dim, then the elements row-major. Only the unsigned byte type (0x08)
// is supported: MNIST labels are a 1-D array (magic 0x00000801), MNIST images a 3-D array
// [n, rows, cols] (magic 0x00000803). Files may be gzip-compressed or raw; the readers tell them
// apart by content, not by name.
//
// Every file problem throws IoError whose message starts with the function called and names the
// file: a missing or unreadable file, a bad magic number or type, a rank-0 array, dims whose
// non-zero product exceeds 2^62, a file shorter than its header promises, bytes after the array,
// images and labels that disagree. Argument mistakes throw InvalidArgumentError.
//
// Ownership: results are plain values owning their memory (Tensors on CPU:0, fresh storage).
// Thread-safety: the functions keep no state; they may run concurrently on any files.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "train/data/example_source.h"

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

// Examples [offset, offset + limit) of an images file and a labels file as an ExampleSource that
// reads each image when a Dataset asks for it (pread on the raw file), so every process of a
// multi-process job reads only the images of its own devices. Opening reads the two headers and
// the labels of the range (a byte each) and checks the files as load_mnist does, the file sizes
// included; features are pixel values / 255, [rows*cols] per example. The files must not change
// while the source lives. A gzip file cannot be read at an offset: its images are decompressed
// at open, once, and served from memory. Errors as load_mnist's, naming open_mnist_examples;
// read() throws IoError if a file fails or shrinks.
class MnistFileExamples final : public ExampleSource {
 public:
  ~MnistFileExamples() override;
  MnistFileExamples(const MnistFileExamples&) = delete;
  MnistFileExamples& operator=(const MnistFileExamples&) = delete;

  int64_t num_examples() const override { return static_cast<int64_t>(labels_.size()); }
  const Shape& example_shape() const override { return example_; }
  void read(const int64_t* ids, int64_t count, float* features, int32_t* labels) const override;
  bool is_cached() const override { return fd_ < 0; }

  // Image bytes read from the file since opening (0 for a gzip file, read whole at open).
  int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  bool reads_on_demand() const { return fd_ >= 0; }

 private:
  friend std::shared_ptr<const MnistFileExamples> open_mnist_examples(const std::string&,
                                                                      const std::string&, int64_t,
                                                                      int64_t);
  MnistFileExamples() = default;

  std::string images_path_;
  int fd_ = -1;                  // the raw images file, or -1 when served from memory
  int64_t first_byte_ = 0;       // file offset of example 0 of the range
  Shape example_;                // {rows * cols}
  std::vector<uint8_t> images_;  // the range's pixels, for a gzip file
  std::vector<int32_t> labels_;  // the range's labels
  mutable std::atomic<int64_t> bytes_read_{0};
};

std::shared_ptr<const MnistFileExamples> open_mnist_examples(const std::string& images_path,
                                                             const std::string& labels_path,
                                                             int64_t offset = 0,
                                                             int64_t limit = -1);

// `n` synthetic 28x28 digits, so that examples run without a download. Each class 0..9 is a
// stroke pattern (seven-segment style, with a diagonal for 4 and 7 and a centred 1) drawn with a
// random size, position, slant, stroke width and intensity, plus pixel noise; an MLP learns them
// to well over 90% test accuracy. Labels are balanced: in every block of ten examples (i / 10)
// each class appears once, in a random order. Example i depends only on (seed, i), not on n; a
// built-in generator (not the standard library's distributions) keeps it reproducible across
// runs and toolchains. Throws InvalidArgumentError for n < 0.
MnistSplit synthetic_digits(int64_t n, uint64_t seed);

}  // namespace dtensor::data
