#include "train/data/cifar10.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace dtensor::data {

namespace {

constexpr const char* kOpen = "open_cifar10_examples";
constexpr const char* kRead = "Cifar10FileExamples::read";
constexpr int64_t kPixels = 32 * 32;

std::vector<std::string> file_names(Cifar10Split split) {
  if (split == Cifar10Split::kTest) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
          "data_batch_5.bin"};
}

// Throws unless `folder` is a folder with at least one entry.
void check_folder(const std::string& folder) {
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) {
    throw_error<IoError>(kOpen, "cannot open folder '{}': {}", folder, std::strerror(errno));
  }
  bool empty = true;
  while (const dirent* entry = ::readdir(dir)) {
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(dir);
  if (empty) {
    throw_error<IoError>(kOpen,
                         "folder '{}' is empty: expected the CIFAR-10 binary files "
                         "data_batch_1.bin .. data_batch_5.bin and test_batch.bin",
                         folder);
  }
}

// Channel-major bytes (R plane, G plane, B plane) -> channels-last floats in [0, 1].
void to_hwc(const uint8_t* chw, float* hwc) {
  for (int64_t p = 0; p < kPixels; ++p) {
    for (int64_t c = 0; c < 3; ++c) {
      hwc[p * 3 + c] = static_cast<float>(chw[c * kPixels + p]) / 255.0f;
    }
  }
}

}  // namespace

std::shared_ptr<const Cifar10FileExamples> open_cifar10_examples(const std::string& folder,
                                                                 Cifar10Split split) {
  check_folder(folder);
  std::shared_ptr<Cifar10FileExamples> source(new Cifar10FileExamples());
  const std::string prefix = !folder.empty() && folder.back() == '/' ? folder : folder + "/";
  for (const std::string& name : file_names(split)) {
    Cifar10FileExamples::File& file = source->files_.emplace_back();
    file.path = prefix + name;
    file.fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (file.fd < 0) {
      throw_error<IoError>(kOpen, "cannot open '{}': {}", file.path, std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(file.fd, &st) != 0) {
      throw_error<IoError>(kOpen, "cannot read '{}': {}", file.path, std::strerror(errno));
    }
    const auto size = static_cast<int64_t>(st.st_size);
    if (size == 0) throw_error<IoError>(kOpen, "'{}' holds no records", file.path);
    if (size % Cifar10FileExamples::kRecordBytes != 0) {
      throw_error<IoError>(kOpen,
                           "'{}' has {} bytes, not a multiple of the {}-byte record (a label "
                           "byte and 3072 pixels): truncated after record {}",
                           file.path, size, Cifar10FileExamples::kRecordBytes,
                           size / Cifar10FileExamples::kRecordBytes);
    }
    file.first = source->num_examples_;
    file.records = size / Cifar10FileExamples::kRecordBytes;
    source->num_examples_ += file.records;
  }
  return source;
}

Cifar10FileExamples::~Cifar10FileExamples() {
  for (const File& file : files_) {
    if (file.fd >= 0) ::close(file.fd);
  }
}

void Cifar10FileExamples::read(const int64_t* ids, int64_t count, float* features,
                               int32_t* labels) const {
  const int64_t row = num_elements(example_);
  std::vector<uint8_t> bytes;
  // Runs of consecutive examples in one file (all of an unshuffled batch) are one read.
  for (int64_t j = 0; j < count;) {
    const auto it = std::upper_bound(files_.begin(), files_.end(), ids[j],
                                     [](int64_t id, const File& f) { return id < f.first; }) -
                    1;
    const int64_t record = ids[j] - it->first;
    int64_t run = 1;
    while (j + run < count && ids[j + run] == ids[j] + run && record + run < it->records) ++run;
    read_run(*it, record, run, bytes, features + j * row, labels + j);
    j += run;
  }
}

void Cifar10FileExamples::read_run(const File& file, int64_t record, int64_t run,
                                   std::vector<uint8_t>& bytes, float* features,
                                   int32_t* labels) const {
  bytes.resize(static_cast<size_t>(run * kRecordBytes));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got =
        ::pread(file.fd, bytes.data() + done, bytes.size() - done,
                static_cast<off_t>(record * kRecordBytes) + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      throw_error<IoError>(kRead, "cannot read '{}': {}", file.path, std::strerror(errno));
    }
    if (got == 0) {
      throw_error<IoError>(kRead, "cannot read '{}': the file is shorter than when it was opened",
                           file.path);
    }
    done += static_cast<size_t>(got);
  }
  bytes_read_.fetch_add(static_cast<int64_t>(done), std::memory_order_relaxed);
  for (int64_t r = 0; r < run; ++r) {
    const uint8_t* rec = bytes.data() + r * kRecordBytes;
    if (rec[0] > 9) {
      throw_error<IoError>(kRead, "'{}' record {} has label {}, expected 0..9", file.path,
                           record + r, static_cast<int>(rec[0]));
    }
    labels[r] = rec[0];
    to_hwc(rec + 1, features + r * 3 * kPixels);
  }
}

}  // namespace dtensor::data
