// POSIX file operations for checkpoints, each throwing IoError("[function] ...") with the path
// and the system's reason, so that callers read as straight-line code.
//
// File descriptors are owned by File (closed on destruction). Thread-safety: a File's pread and
// pwrite may run concurrently from several threads; the other functions are independent calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtensor::checkpoint_internal {

class File {
 public:
  // Creates or truncates `path` for writing.
  static File create(const std::string& path, const std::string& function);
  static File open_read(const std::string& path, const std::string& function);
  // A directory, for sync().
  static File open_directory(const std::string& path, const std::string& function);
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  uint64_t size() const;
  // Writes or reads exactly n bytes at `offset` (retrying short transfers); a read past the end
  // of the file throws.
  void pwrite_all(const void* data, size_t n, uint64_t offset) const;
  void pread_all(void* data, size_t n, uint64_t offset) const;
  void sync() const;
  // Closes now, reporting errors (the destructor ignores them).
  void close();

 private:
  File(int fd, std::string path, std::string function)
      : fd_(fd), path_(std::move(path)), function_(std::move(function)) {}
  int fd_ = -1;
  std::string path_;
  std::string function_;
};

// The whole file as a string.
std::string read_file(const std::string& path, const std::string& function);
// Creates `path` with `contents` and fsyncs it.
void write_file_synced(const std::string& path, const std::string& contents,
                       const std::string& function);
// fsync of a directory, so that entries created or renamed in it are durable.
void sync_directory(const std::string& path, const std::string& function);
// mkdir -p.
void make_directories(const std::string& path, const std::string& function);
// Atomically puts the directory `from` at `to`. If `to` exists it is swapped with `from`
// (renameat2 RENAME_EXCHANGE), so `to` is at every moment either the old or the new directory;
// the old one is then at `from`. Returns true if `to` existed. Where the file system cannot swap,
// the old `to` is first renamed to `from` + ".old" (a short window in which `to` is missing).
bool replace_directory(const std::string& from, const std::string& to, const std::string& function);
// Renames a file or directory (atomic within a file system).
void rename_path(const std::string& from, const std::string& to, const std::string& function);
// rm -rf; a missing path is fine.
void remove_all(const std::string& path, const std::string& function);
bool exists(const std::string& path);
bool is_directory(const std::string& path);
// Names of the entries of a directory (not "." or ".."), unsorted; empty if it does not exist.
std::vector<std::string> list_directory(const std::string& path, const std::string& function);
// The parent directory of a path ("." for a bare name) and the path without trailing slashes.
std::string parent_directory(const std::string& path);
std::string strip_trailing_slashes(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace dtensor::checkpoint_internal
