#include "train/data/mnist_dir.h"

#include <algorithm>
#include <filesystem>

#include "runtime/error.h"
#include "train/data/idx.h"

namespace dtensor::data {

std::string find_idx_file(const std::string& dir, const std::string& name) {
  for (const std::string& candidate : {dir + "/" + name, dir + "/" + name + ".gz"}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return "";
}

bool has_mnist_files(const std::string& dir) {
  return !find_idx_file(dir, "t10k-images-idx3-ubyte").empty() &&
         !find_idx_file(dir, "t10k-labels-idx1-ubyte").empty();
}

MnistDirSplits open_mnist_dir(const std::string& dir, int64_t train_limit, int64_t test_limit,
                              const char* fn) {
  const std::string test_images = find_idx_file(dir, "t10k-images-idx3-ubyte");
  const std::string test_labels = find_idx_file(dir, "t10k-labels-idx1-ubyte");
  const std::string train_images = find_idx_file(dir, "train-images-idx3-ubyte");
  const std::string train_labels = find_idx_file(dir, "train-labels-idx1-ubyte");
  if (test_images.empty() || test_labels.empty()) {
    throw_error<IoError>(
        fn, "no t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] in '{}'", dir);
  }
  if (!train_images.empty() && !train_labels.empty()) {
    return {open_mnist_examples(train_images, train_labels, 0, train_limit),
            open_mnist_examples(test_images, test_labels, 0, test_limit),
            "MNIST-format train/t10k in '" + dir + "'"};
  }
  constexpr int64_t kHalf = 5000;
  const int64_t n_train = train_limit > 0 ? std::min(train_limit, kHalf) : kHalf;
  const int64_t n_test = test_limit > 0 ? std::min(test_limit, kHalf) : kHalf;
  return {open_mnist_examples(test_images, test_labels, 0, n_train),
          open_mnist_examples(test_images, test_labels, kHalf, n_test),
          "MNIST-format t10k split 5000/5000 in '" + dir + "'"};
}

}  // namespace dtensor::data
