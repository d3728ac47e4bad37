// Fuzzes the IDX readers: read_idx on the input as a file (gzip-compressed first when the first
// byte is odd), and for a [n, rows, cols] array, load_mnist and open_mnist_examples with n labels,
// reading every example on demand. Property: both loaders give the same pixels.
#include <zlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "fuzz/harness.h"
#include "train/data/idx.h"

namespace {

void write(const std::string& path, const uint8_t* data, size_t size, bool gzip) {
  gzFile f = gzopen(path.c_str(), gzip ? "wb" : "wbT");
  if (f == nullptr) dtensor::fuzz::finding("cannot write " + path);
  if (size > 0) gzwrite(f, data, static_cast<unsigned>(size));
  gzclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtensor;
  if (size == 0) return 0;
  const bool gzip = (data[0] & 1) != 0;
  const std::string images = fuzz::scratch_directory() + "/images.idx";
  const std::string labels = fuzz::scratch_directory() + "/labels.idx";
  write(images, data + 1, size - 1, gzip);
  fuzz::accept_dtensor_errors([&] {
    data::IdxArray array = data::read_idx(images);
    if (static_cast<int64_t>(array.data.size()) != num_elements(array.shape)) {
      fuzz::finding("read_idx returned " + std::to_string(array.data.size()) + " bytes for " +
                    shape_to_string(array.shape));
    }
    if (array.shape.size() != 3 || array.shape[0] > 4096) return;
    const int64_t n = array.shape[0];
    std::vector<uint8_t> label_file = {0,
                                       0,
                                       8,
                                       1,
                                       static_cast<uint8_t>(n >> 24),
                                       static_cast<uint8_t>(n >> 16),
                                       static_cast<uint8_t>(n >> 8),
                                       static_cast<uint8_t>(n)};
    for (int64_t i = 0; i < n; ++i) label_file.push_back(static_cast<uint8_t>(i % 10));
    write(labels, label_file.data(), label_file.size(), false);
    data::MnistSplit split = data::load_mnist(images, labels);
    auto source = data::open_mnist_examples(images, labels);
    const int64_t pixels = source->example_shape()[0];
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
    std::vector<float> features(static_cast<size_t>(n * pixels));
    std::vector<int32_t> ys(static_cast<size_t>(n));
    source->read(ids.data(), n, features.data(), ys.data());
    if (features.size() * sizeof(float) != split.images.nbytes() ||
        (!features.empty() &&
         std::memcmp(features.data(), split.images.raw_data(), split.images.nbytes()))) {
      fuzz::finding("open_mnist_examples and load_mnist disagree");
    }
  });
  return 0;
}
