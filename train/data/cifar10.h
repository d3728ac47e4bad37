// The CIFAR-10 binary files as an ExampleSource that reads each image when a Dataset asks for it.
//
// The binary version of CIFAR-10 (cifar-10-binary.tar.gz, folder cifar-10-batches-bin) holds
// data_batch_1.bin .. data_batch_5.bin (training, 10000 images each) and test_batch.bin (10000).
// Each file is a run of 3073-byte records: a label byte (0..9), then 3072 pixel bytes, channel
// major (1024 red, 1024 green, 1024 blue, each 32x32 row-major). Example i of a split is record i
// of the split's files taken in order.
//
// Each example's features are f32 [32, 32, 3] (NHWC without the N: channels last, converted from
// the file's channel-major order), pixel values / 255, so in [0, 1] like the MNIST readers'
// (cifar10_train_augmentation's brightness delta 63/255 assumes that scale).
//
// Opening checks the folder and the file sizes only; a label byte is checked when its record is
// read, so that every process of a multi-process job reads only the records of its own devices
// (pread on each file). Errors are IoError, naming the function and the path: a missing folder
// or file, an empty folder, a file with no records or a size that is not a multiple of 3073
// (truncated), a label byte outside 0..9 (with the record's index in its file), a failed read.
//
// Ownership: the source owns its open files (closed when it is destroyed); the files must not
// change while it lives. Thread-safety: immutable after opening; read() may run concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/data/example_source.h"

namespace dtensor::data {

enum class Cifar10Split { kTrain, kTest };

class Cifar10FileExamples final : public ExampleSource {
 public:
  static constexpr int64_t kRecordBytes = 1 + 3 * 32 * 32;

  ~Cifar10FileExamples() override;
  Cifar10FileExamples(const Cifar10FileExamples&) = delete;
  Cifar10FileExamples& operator=(const Cifar10FileExamples&) = delete;

  int64_t num_examples() const override { return num_examples_; }
  const Shape& example_shape() const override { return example_; }
  void read(const int64_t* ids, int64_t count, float* features, int32_t* labels) const override;

  // Record bytes read from the files since opening.
  int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  friend std::shared_ptr<const Cifar10FileExamples> open_cifar10_examples(const std::string&,
                                                                          Cifar10Split);
  Cifar10FileExamples() = default;

  struct File {
    std::string path;
    int fd = -1;
    int64_t first = 0;    // the split's index of the file's first record
    int64_t records = 0;  // records in the file
  };
  // Reads `run` consecutive records of `file` from record `record` on into features and labels.
  void read_run(const File& file, int64_t record, int64_t run, std::vector<uint8_t>& bytes,
                float* features, int32_t* labels) const;

  std::vector<File> files_;
  int64_t num_examples_ = 0;
  Shape example_{32, 32, 3};
  mutable std::atomic<int64_t> bytes_read_{0};
};

// The examples of `split` from the folder holding the CIFAR-10 binary files (cifar-10-batches-bin).
std::shared_ptr<const Cifar10FileExamples> open_cifar10_examples(const std::string& folder,
                                                                 Cifar10Split split);

}  // namespace dtensor::data
