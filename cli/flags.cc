#include "cli/flags.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <system_error>

namespace dtensor::cli {
namespace {

namespace fs = std::filesystem;

// CLI11 reports an exception thrown by an option's callback as a parse error.
[[noreturn]] void reject(const std::string& flag, const std::string& what) {
  throw CLI::ValidationError(flag + ": " + what);
}

int64_t to_int(const std::string& flag, const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) {
    reject(flag, "integer '" + text + "' is out of range");
  }
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    reject(flag, "expected an integer, got '" + text + "'");
  }
  return v;
}

double to_double(const std::string& flag, const std::string& text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v)) {
    reject(flag, "expected a number, got '" + text + "'");
  }
  return v;
}

std::string show(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Whether a file can be opened for writing here; leaves no new file behind.
std::string writable_file(const std::string& flag, const fs::path& path) {
  // Every rank of an mpirun job checks its flags at once: a file another rank is creating and
  // removing again may appear or vanish between two calls, so retry on those two answers.
  int fd = -1;
  bool created = false;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd >= 0;
    if (fd >= 0 || errno != EEXIST) break;
    fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) break;
  }
  if (fd < 0) {
    return flag + ": cannot write '" + path.string() +
           "': " + std::error_code(errno, std::generic_category()).message();
  }
  ::close(fd);
  if (created) ::unlink(path.c_str());
  return "";
}

std::string make_folder(const std::string& flag, const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return "";
  // Another rank of the job may create the same folder at any moment between these checks and
  // the call below (libstdc++ then reports EEXIST): what matters is that a folder exists now.
  std::error_code again;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, again)) {
    return flag + ": '" + dir.string() + "' exists and is not a folder";
  }
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir, again)) {
    return flag + ": cannot create folder '" + dir.string() + "': " + ec.message();
  }
  return "";
}

}  // namespace

std::string resolve_path(const std::string& path) {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || dir == nullptr || *dir == '\0' || fs::path(path).is_absolute()) return path;
  return (fs::path(dir) / path).lexically_normal().string();
}

std::string check_path(const std::string& flag, const std::string& path, PathKind kind) {
  std::error_code ec;
  switch (kind) {
    case PathKind::kInputDir:
      if (!fs::is_directory(path, ec)) return flag + ": no folder '" + path + "'";
      return "";
    case PathKind::kOutputFile: {
      if (fs::is_directory(path, ec)) {
        return flag + ": '" + path + "' is a folder, expected a file name";
      }
      fs::path parent = fs::path(path).parent_path();
      if (parent.empty()) parent = ".";
      if (std::string e = make_folder(flag, parent); !e.empty()) return e;
      return writable_file(flag, path);
    }
    case PathKind::kOutputDir: {
      if (std::string e = make_folder(flag, path); !e.empty()) return e;
      std::string probe = (fs::path(path) / ".dtensor-write-probe-XXXXXX").string();
      int fd = ::mkstemp(probe.data());
      if (fd < 0) {
        return flag + ": cannot write in folder '" + path +
               "': " + std::error_code(errno, std::generic_category()).message();
      }
      ::close(fd);
      ::unlink(probe.c_str());
      return "";
    }
  }
  return "";
}

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), app_(std::make_unique<CLI::App>(description, program_)) {
  app_->footer(
      "Flags take --name=value or --name value. Relative paths are taken from the directory "
      "`bazel run` was started in.");
  app_->get_formatter()->column_width(34);
}

Flags::~Flags() = default;

void Flags::add_int(const std::string& name, int64_t* value, const std::string& help, int64_t min,
                    int64_t max) {
  app_->add_option_function<std::string>(
          name,
          [name, value, min, max](const std::string& text) {
            const int64_t v = to_int(name, text);
            if (v < min) reject(name, "must be at least " + std::to_string(min) + ", got " + text);
            if (v > max) reject(name, "must be at most " + std::to_string(max) + ", got " + text);
            *value = v;
          },
          help)
      ->type_name("INT")
      ->default_str(std::to_string(*value));
}

void Flags::add_uint(const std::string& name, uint64_t* value, const std::string& help) {
  app_->add_option_function<std::string>(
          name,
          [name, value](const std::string& text) {
            uint64_t v = 0;
            auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            if (ec == std::errc::result_out_of_range) {
              reject(name, "integer '" + text + "' is out of range");
            }
            if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
              reject(name, "expected a non-negative integer, got '" + text + "'");
            }
            *value = v;
          },
          help)
      ->type_name("UINT")
      ->default_str(std::to_string(*value));
}

void Flags::add_double(const std::string& name, double* value, const std::string& help,
                       bool positive) {
  app_->add_option_function<std::string>(
          name,
          [name, value, positive](const std::string& text) {
            const double v = to_double(name, text);
            if (positive && !(v > 0)) reject(name, "must be greater than 0, got " + text);
            *value = v;
          },
          help)
      ->type_name("NUMBER")
      ->default_str(show(*value));
}

void Flags::add_string(const std::string& name, std::string* value, const std::string& help) {
  add_string(name, value, help, nullptr);
}

void Flags::add_string(const std::string& name, std::string* value, const std::string& help,
                       std::function<std::string(const std::string&)> check) {
  app_->add_option_function<std::string>(
          name,
          [name, value, check](const std::string& text) {
            if (check) {
              if (std::string e = check(text); !e.empty()) reject(name, e);
            }
            *value = text;
          },
          help)
      ->type_name("TEXT")
      ->default_str(*value);
}

void Flags::add_bool(const std::string& name, bool* value, const std::string& help) {
  app_->add_flag(name, *value, help);
}

void Flags::add_path(const std::string& name, std::string* value, const std::string& help,
                     PathKind kind) {
  app_->add_option(name, *value, help)
      ->type_name(kind == PathKind::kOutputFile ? "FILE" : "DIR")
      ->default_str(*value);
  paths_.push_back({name, value, kind});
}

void Flags::add_positional(const std::string& name, std::vector<std::string>* values,
                           const std::string& help) {
  app_->add_option(name, *values, help);
}

std::optional<int> Flags::parse(int argc, const char* const* argv, bool print) {
  try {
    app_->parse(argc, argv);
    for (const Path& p : paths_) {
      if (p.value->empty()) continue;
      *p.value = resolve_path(*p.value);
      if (std::string e = check_path(p.name, *p.value, p.kind); !e.empty()) {
        throw CLI::ValidationError(e);
      }
    }
  } catch (const CLI::CallForHelp&) {
    if (print) std::cout << help() << std::flush;
    return 0;
  } catch (const CLI::ParseError& e) {
    if (print) {
      std::cerr << program_ << ": " << e.what() << "\n"
                << "Run '" << program_ << " --help' for the flags.\n"
                << std::flush;
    }
    return 2;
  }
  return std::nullopt;
}

std::string Flags::help() const { return app_->help(); }

}  // namespace dtensor::cli
