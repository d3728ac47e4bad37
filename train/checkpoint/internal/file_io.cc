#include "train/checkpoint/internal/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "runtime/error.h"

namespace dtensor::checkpoint_internal {
namespace {

std::string reason(int err) { return std::system_category().message(err); }

[[noreturn]] void fail(const std::string& function, const std::string& what,
                       const std::string& path, int err) {
  throw_error<IoError>(function, "cannot {} {}: {}", what, path, reason(err));
}

int open_or_throw(const std::string& path, int flags, const std::string& function,
                  const char* what) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(function, what, path, errno);
  return fd;
}

}  // namespace

File File::create(const std::string& path, const std::string& function) {
  return File(open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC, function, "create"), path,
              function);
}

File File::open_read(const std::string& path, const std::string& function) {
  return File(open_or_throw(path, O_RDONLY, function, "open"), path, function);
}

File File::open_directory(const std::string& path, const std::string& function) {
  return File(open_or_throw(path, O_RDONLY | O_DIRECTORY, function, "open directory"), path,
              function);
}

File::File(File&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), function_(std::move(other.function_)) {
  other.fd_ = -1;
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    function_ = std::move(other.function_);
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail(function_, "stat", path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

void File::pwrite_all(const void* data, size_t n, uint64_t offset) const {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(function_, "write", path_, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void File::pread_all(void* data, size_t n, uint64_t offset) const {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(function_, "read", path_, errno);
    }
    if (r == 0) {
      throw_error<IoError>(function_, "{} ends at byte {}, before the {} bytes expected there",
                           path_, offset, n);
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

void File::sync() const {
  if (::fsync(fd_) != 0) fail(function_, "fsync", path_, errno);
}

void File::close() {
  if (fd_ < 0) return;
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) fail(function_, "close", path_, errno);
}

std::string read_file(const std::string& path, const std::string& function) {
  File f = File::open_read(path, function);
  std::string out(f.size(), '\0');
  f.pread_all(out.data(), out.size(), 0);
  return out;
}

void write_file_synced(const std::string& path, const std::string& contents,
                       const std::string& function) {
  File f = File::create(path, function);
  f.pwrite_all(contents.data(), contents.size(), 0);
  f.sync();
  f.close();
}

void sync_directory(const std::string& path, const std::string& function) {
  File::open_directory(path, function).sync();
}

void make_directories(const std::string& path, const std::string& function) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail(function, "create directory", path, ec.value());
}

bool replace_directory(const std::string& from, const std::string& to,
                       const std::string& function) {
  if (::rename(from.c_str(), to.c_str()) == 0) return false;  // `to` absent, or an empty dir
  if (errno != EEXIST && errno != ENOTEMPTY) {
    throw_error<IoError>(function, "cannot rename {} to {}: {}", from, to, reason(errno));
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) {
    throw_error<IoError>(function, "cannot swap {} and {}: {}", from, to, reason(errno));
  }
  // No RENAME_EXCHANGE on this file system: move the old one aside first.
  const std::string aside = from + ".old";
  rename_path(to, aside, function);
  rename_path(from, to, function);
  rename_path(aside, from, function);
  return true;
}

void rename_path(const std::string& from, const std::string& to, const std::string& function) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw_error<IoError>(function, "cannot rename {} to {}: {}", from, to, reason(errno));
  }
}

void remove_all(const std::string& path, const std::string& function) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) fail(function, "remove", path, ec.value());
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_directory(const std::string& path, const std::string& function) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return names;
    fail(function, "list", path, errno);
  }
  while (const dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  return names;
}

std::string strip_trailing_slashes(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_directory(const std::string& path) {
  std::string p = strip_trailing_slashes(path);
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace dtensor::checkpoint_internal
