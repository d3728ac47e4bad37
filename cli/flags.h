// Command-line flags for the examples and benchmarks, on top of CLI11.
//
//   cli::Flags flags("train", "Trains the MNIST MLP.");
//   flags.add_int("--epochs", &epochs, "epochs to train", /*min=*/1);
//   flags.add_path("--plot", &plot, "PNG of the curves", cli::PathKind::kOutputFile);
//   if (std::optional<int> code = flags.parse(argc, argv)) return *code;
//
// Both `--name=value` and `--name value` are accepted; `--help` prints every flag with its
// default and parse() returns 0 (the program should then exit). Values are parsed strictly: an
// integer flag rejects "1e2" and "1.5", a number flag rejects "abc", and bounds are checked, each
// with a message naming the flag and the value. Unknown flags and stray arguments are errors.
// On an error parse() prints "<program>: <message>" and a hint to stderr and returns 2, before
// the program has done any work.
//
// Paths are resolved against the directory `bazel run` was started in (BUILD_WORKING_DIRECTORY)
// when relative. Output paths are validated during parse: their folders are created and must be
// writable, so a bad --plot fails at start, not after training.
//
// Not thread-safe; one Flags per program.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dtensor::cli {

enum class PathKind {
  kInputDir,    // must exist and be a directory
  kOutputFile,  // parent folders created; the file must be creatable or writable
  kOutputDir,   // created if missing; must be a writable directory
};

class Flags {
 public:
  Flags(std::string program, std::string description);
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // A signed integer in [min, max].
  void add_int(const std::string& name, int64_t* value, const std::string& help,
               int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  // A non-negative integer (seeds).
  void add_uint(const std::string& name, uint64_t* value, const std::string& help);
  // A finite number; with `positive`, greater than zero.
  void add_double(const std::string& name, double* value, const std::string& help,
                  bool positive = false);
  void add_string(const std::string& name, std::string* value, const std::string& help);
  // A string validated by `check`, which returns an error message ("" when the value is fine).
  void add_string(const std::string& name, std::string* value, const std::string& help,
                  std::function<std::string(const std::string&)> check);
  // A switch: `--name` alone sets it.
  void add_bool(const std::string& name, bool* value, const std::string& help);
  // A path, resolved and validated as `kind` says (an empty value means "none" and is kept).
  void add_path(const std::string& name, std::string* value, const std::string& help,
                PathKind kind);
  // Positional arguments (the rest), when a program takes them.
  void add_positional(const std::string& name, std::vector<std::string>* values,
                      const std::string& help);

  // Parses argv[1..argc). nullopt: go on. Otherwise the program should return the code: 0 after
  // --help, 2 after an error (message printed). `print` false keeps this process quiet (the other
  // ranks of an mpirun job).
  std::optional<int> parse(int argc, const char* const* argv, bool print = true);

  // The usage text --help prints.
  std::string help() const;

 private:
  struct Path {
    std::string name;
    std::string* value;
    PathKind kind;
  };
  std::string program_;
  std::unique_ptr<CLI::App> app_;
  std::vector<Path> paths_;
};

// `path` taken relative to the directory `bazel run` was started in, when it is relative and
// BUILD_WORKING_DIRECTORY is set; otherwise unchanged.
std::string resolve_path(const std::string& path);

// Validates (and prepares) `path` as `kind` says; returns an error message naming `flag`, or ""
// when it is fine. Creates the folders an output needs.
std::string check_path(const std::string& flag, const std::string& path, PathKind kind);

}  // namespace dtensor::cli
