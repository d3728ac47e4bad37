// The MNIST-format IDX files of one folder (MNIST, Fashion-MNIST) as a training and a test set,
// shared by the examples that train on them.
//
// A folder holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte, each raw or gzip-compressed (".gz"); a raw file is preferred, since
// its images are read on demand (idx.h). The t10k pair is required. Without the train pair the
// t10k set is split: examples [0, 5000) train and [5000, 10000) test.
//
// Errors: IoError "[<fn>] no t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] in
// '<dir>'" (fn: the caller's name), and the file errors of open_mnist_examples.
// Thread-safety: the functions keep no state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/data/example_source.h"

namespace dtensor::data {

// Where the Debian package dataset-fashion-mnist installs Fashion-MNIST.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// dir/name if it exists, else dir/name.gz if that exists, else "".
std::string find_idx_file(const std::string& dir, const std::string& name);

// Whether `dir` holds the t10k pair (so open_mnist_dir can read it).
bool has_mnist_files(const std::string& dir);

struct MnistDirSplits {
  std::shared_ptr<const ExampleSource> train, test;
  std::string description;  // "MNIST-format train/t10k in '<dir>'", or the t10k split's
};

// The training and test sets of `dir`: the first train_limit / test_limit examples of each
// (-1: all; at most 5000 each when the t10k set is split).
MnistDirSplits open_mnist_dir(const std::string& dir, int64_t train_limit = -1,
                              int64_t test_limit = -1, const char* fn = "open_mnist_dir");

}  // namespace dtensor::data
