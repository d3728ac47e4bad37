#include "train/data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>

#include "runtime/error.h"

namespace dtensor::data {

namespace {

constexpr uint8_t kTypeU8 = 0x08;

// An open gzip or raw file (gzread passes raw files through), closed on scope exit.
class GzReader {
 public:
  GzReader(const std::string& path, const char* function) : path_(path), function_(function) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      const char* reason = errno != 0 ? std::strerror(errno) : "out of memory";
      throw_error<IoError>(function_, "cannot open '{}': {}", path_, reason);
    }
    gzbuffer(file_, 1 << 17);
  }
  ~GzReader() { gzclose(file_); }
  // True if the file is not compressed (meaningful once something was read).
  bool direct() { return gzdirect(file_) == 1; }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `n` bytes; fewer only at the end of the data (a truncated gzip stream included,
  // which the caller reports with the byte counts).
  int64_t read(void* dst, int64_t n) {
    int64_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, INT_MAX / 2));
      const int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got < 0) fail();
      if (got == 0) break;
      done += got;
    }
    int err = Z_OK;
    gzerror(file_, &err);
    if (err != Z_OK && err != Z_BUF_ERROR) fail();  // Z_BUF_ERROR: the stream ends early
    return done;
  }

 private:
  [[noreturn]] void fail() {
    // zlib's message (strerror for system errors) starts with the path: name the file once.
    int err = Z_OK;
    std::string reason = gzerror(file_, &err);
    const std::string prefix = path_ + ": ";
    if (reason.compare(0, prefix.size(), prefix) == 0) reason.erase(0, prefix.size());
    throw_error<IoError>(function_, "cannot read '{}': {}", path_, reason);
  }

  std::string path_;
  const char* function_;
  gzFile file_ = nullptr;
};

struct IdxHeader {
  Shape shape;
  int64_t total = 0;         // elements (bytes) of the array
  int64_t header_bytes = 0;  // where the elements start
};

// Reads and checks the magic number and the dims.
IdxHeader read_header(GzReader& file, const std::string& path, const char* function) {
  std::array<uint8_t, 4> magic{};
  int64_t got = file.read(magic.data(), 4);
  if (got < 4) {
    throw_error<IoError>(function, "'{}' is truncated: its header needs 4 bytes, the file has {}",
                         path, got);
  }
  if (magic[0] != 0 || magic[1] != 0) {
    throw_error<IoError>(function,
                         "'{}' is not an IDX file: magic number 0x{:02x}{:02x}{:02x}{:02x} does "
                         "not start with two zero bytes",
                         path, magic[0], magic[1], magic[2], magic[3]);
  }
  if (magic[2] != kTypeU8) {
    throw_error<IoError>(function,
                         "'{}' has unsupported type 0x{:02x} (only 0x08, unsigned byte, is "
                         "supported)",
                         path, magic[2]);
  }
  const int64_t ndims = magic[3];
  if (ndims == 0) {
    throw_error<IoError>(function, "'{}' declares an array of rank 0 (an IDX array has dims)",
                         path);
  }
  std::vector<uint8_t> dims_bytes(static_cast<size_t>(4 * ndims));
  got = file.read(dims_bytes.data(), 4 * ndims);
  if (got < 4 * ndims) {
    throw_error<IoError>(function, "'{}' is truncated: its header needs {} bytes, the file has {}",
                         path, 4 + 4 * ndims, 4 + got);
  }
  IdxHeader header;
  header.header_bytes = 4 + 4 * ndims;
  // The bound applies to the product of the non-zero dims too: an array with no images still has
  // rows * cols pixels per image, which the readers multiply.
  int64_t nonzero = 1;
  bool has_zero = false;
  for (int64_t d = 0; d < ndims; ++d) {
    const uint8_t* b = &dims_bytes[static_cast<size_t>(4 * d)];
    const int64_t size =
        (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    header.shape.push_back(size);
    if (size == 0) {
      has_zero = true;
      continue;
    }
    if (nonzero > (std::numeric_limits<int64_t>::max() >> 1) / size) {
      throw_error<IoError>(function, "'{}' declares a shape {} of more than 2^62 {}", path,
                           shape_to_string(header.shape),
                           has_zero ? "elements in its non-zero dims" : "bytes");
    }
    nonzero *= size;
  }
  header.total = has_zero ? 0 : nonzero;
  return header;
}

IdxArray read_idx_for(const std::string& path, const char* function) {
  GzReader file(path, function);
  IdxHeader header = read_header(file, path, function);
  IdxArray array;
  array.shape = header.shape;
  const int64_t total = header.total;
  // Grow geometrically rather than trusting the header with one allocation: a corrupt header
  // must not reserve terabytes before the read finds out the file is short.
  int64_t have = 0;
  while (have < total) {
    const int64_t next = std::min(total, have + std::max<int64_t>(have, int64_t{1} << 20));
    array.data.resize(static_cast<size_t>(next));
    const int64_t n = file.read(array.data.data() + have, next - have);
    have += n;
    if (have < next) {
      throw_error<IoError>(function,
                           "'{}' is truncated: shape {} needs {} bytes of data, the file has {}",
                           path, shape_to_string(array.shape), total, have);
    }
  }
  std::array<uint8_t, 4096> rest;
  int64_t extra = 0;
  while (int64_t n = file.read(rest.data(), static_cast<int64_t>(rest.size()))) extra += n;
  if (extra > 0) {
    throw_error<IoError>(function, "'{}' has {} bytes after the end of its {} array", path, extra,
                         shape_to_string(array.shape));
  }
  return array;
}

}  // namespace

IdxArray read_idx(const std::string& path) { return read_idx_for(path, "read_idx"); }

namespace {

// Checks that `images` ([n, rows, cols]) and `labels` ([n]) pair up and that [offset, offset +
// limit) lies within them; returns the limit, -1 resolved to the rest.
int64_t check_mnist_range(const Shape& images, const std::string& images_path, const Shape& labels,
                          const std::string& labels_path, int64_t offset, int64_t limit,
                          const char* fn) {
  if (images.size() != 3) {
    throw_error<IoError>(fn, "'{}' holds an array of shape {}, expected images [n,rows,cols]",
                         images_path, shape_to_string(images));
  }
  if (labels.size() != 1) {
    throw_error<IoError>(fn, "'{}' holds an array of shape {}, expected labels [n]", labels_path,
                         shape_to_string(labels));
  }
  const int64_t n = images[0];
  if (labels[0] != n) {
    throw_error<IoError>(fn, "'{}' holds {} images but '{}' holds {} labels", images_path, n,
                         labels_path, labels[0]);
  }
  if (offset < 0 || offset > n) {
    throw_error<InvalidArgumentError>(
        fn, "offset {} is outside [0, {}] (the files hold {} examples)", offset, n, n);
  }
  if (limit == -1) limit = n - offset;
  if (limit > n - offset) {
    throw_error<InvalidArgumentError>(
        fn, "examples [{}, {}) go past the {} examples the files hold", offset, offset + limit, n);
  }
  return limit;
}

void check_limit(int64_t limit, const char* fn) {
  if (limit < -1) {
    throw_error<InvalidArgumentError>(fn, "limit {} must be -1 (all) or at least 0", limit);
  }
}

// Pixel byte -> f32 in [0, 1].
const std::array<float, 256>& pixel_scale() {
  static const std::array<float, 256> scale = [] {
    std::array<float, 256> s{};
    for (int v = 0; v < 256; ++v) s[static_cast<size_t>(v)] = static_cast<float>(v) / 255.0f;
    return s;
  }();
  return scale;
}

void to_pixels(const uint8_t* src, int64_t n, float* dst) {
  const std::array<float, 256>& scale = pixel_scale();
  for (int64_t i = 0; i < n; ++i) dst[i] = scale[src[i]];
}

}  // namespace

MnistSplit load_mnist(const std::string& images_path, const std::string& labels_path,
                      int64_t offset, int64_t limit) {
  const char* fn = "load_mnist";
  check_limit(limit, fn);
  IdxArray images = read_idx_for(images_path, fn);
  IdxArray labels = read_idx_for(labels_path, fn);
  limit =
      check_mnist_range(images.shape, images_path, labels.shape, labels_path, offset, limit, fn);
  const int64_t pixels = images.shape[1] * images.shape[2];
  MnistSplit split{Tensor::empty({limit, pixels}, DType::kF32),
                   Tensor::empty({limit}, DType::kI32)};
  to_pixels(images.data.data() + offset * pixels, limit * pixels, split.images.data<float>());
  int32_t* y = split.labels.data<int32_t>();
  for (int64_t i = 0; i < limit; ++i) y[i] = labels.data[static_cast<size_t>(offset + i)];
  return split;
}

std::shared_ptr<const MnistFileExamples> open_mnist_examples(const std::string& images_path,
                                                             const std::string& labels_path,
                                                             int64_t offset, int64_t limit) {
  const char* fn = "open_mnist_examples";
  check_limit(limit, fn);
  std::shared_ptr<MnistFileExamples> source(new MnistFileExamples());
  source->images_path_ = images_path;
  IdxHeader header;
  bool raw = false;
  {
    GzReader file(images_path, fn);
    header = read_header(file, images_path, fn);
    raw = file.direct();
  }
  IdxArray labels = read_idx_for(labels_path, fn);
  limit =
      check_mnist_range(header.shape, images_path, labels.shape, labels_path, offset, limit, fn);
  const int64_t pixels = header.shape[1] * header.shape[2];
  source->example_ = {pixels};
  source->labels_.assign(labels.data.begin() + offset, labels.data.begin() + offset + limit);
  if (!raw) {
    IdxArray images = read_idx_for(images_path, fn);
    source->images_.assign(images.data.begin() + offset * pixels,
                           images.data.begin() + (offset + limit) * pixels);
    return source;
  }
  source->fd_ = ::open(images_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd_ < 0) {
    throw_error<IoError>(fn, "cannot open '{}': {}", images_path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(source->fd_, &st) != 0) {
    throw_error<IoError>(fn, "cannot read '{}': {}", images_path, std::strerror(errno));
  }
  const int64_t data_bytes = static_cast<int64_t>(st.st_size) - header.header_bytes;
  if (data_bytes < header.total) {
    throw_error<IoError>(fn, "'{}' is truncated: shape {} needs {} bytes of data, the file has {}",
                         images_path, shape_to_string(header.shape), header.total, data_bytes);
  }
  if (data_bytes > header.total) {
    throw_error<IoError>(fn, "'{}' has {} bytes after the end of its {} array", images_path,
                         data_bytes - header.total, shape_to_string(header.shape));
  }
  source->first_byte_ = header.header_bytes + offset * pixels;
  return source;
}

MnistFileExamples::~MnistFileExamples() {
  if (fd_ >= 0) ::close(fd_);
}

void MnistFileExamples::read(const int64_t* ids, int64_t count, float* features,
                             int32_t* labels) const {
  const int64_t pixels = example_[0];
  std::vector<uint8_t> bytes;
  // Runs of consecutive examples (all of an unshuffled batch) are one read.
  for (int64_t j = 0; j < count;) {
    int64_t run = 1;
    while (j + run < count && ids[j + run] == ids[j] + run) ++run;
    const uint8_t* src;
    if (fd_ < 0) {
      src = images_.data() + ids[j] * pixels;
    } else {
      bytes.resize(static_cast<size_t>(run * pixels));
      size_t done = 0;
      while (done < bytes.size()) {
        const ssize_t got =
            ::pread(fd_, bytes.data() + done, bytes.size() - done,
                    static_cast<off_t>(first_byte_ + ids[j] * pixels) + static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
          throw_error<IoError>("MnistFileExamples::read", "cannot read '{}': {}", images_path_,
                               std::strerror(errno));
        }
        if (got == 0) {
          throw_error<IoError>("MnistFileExamples::read",
                               "cannot read '{}': the file is shorter than when it was opened",
                               images_path_);
        }
        done += static_cast<size_t>(got);
      }
      bytes_read_.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
      src = bytes.data();
    }
    to_pixels(src, run * pixels, features + j * pixels);
    for (int64_t r = 0; r < run; ++r) labels[j + r] = labels_[static_cast<size_t>(ids[j] + r)];
    j += run;
  }
}

}  // namespace dtensor::data
