// Error types of the dtensor runtime.
//
// Every user mistake throws a subclass of dtensor::Error. Messages start with the function that
// rejected the input, in brackets, and name the shapes and layouts involved:
//   "[relayout] source layout sharding_specs:x, mesh:|x=8|... is on another mesh than ..."
// Errors are plain values: copyable, and safe to read from several threads.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace dtensor {

class Error : public std::runtime_error {
 public:
  Error(const std::string& function, const std::string& message)
      : std::runtime_error("[" + function + "] " + message), function_(function) {}

  // The function named at the start of the message, without brackets.
  const std::string& function() const { return function_; }

 private:
  std::string function_;
};

#define DTENSOR_DEFINE_ERROR(Name) \
  class Name : public Error {      \
   public:                         \
    using Error::Error;            \
  }

// A value is outside what the function accepts (bad size, unknown name, malformed text).
DTENSOR_DEFINE_ERROR(InvalidArgumentError);
// Shapes or ranks of the inputs do not agree with each other or with a layout.
DTENSOR_DEFINE_ERROR(ShapeError);
// Dtypes of the inputs do not agree, or a dtype is not supported by the operation.
DTENSOR_DEFINE_ERROR(DTypeError);
// A mesh is malformed, or inputs live on different meshes.
DTENSOR_DEFINE_ERROR(MeshError);
// A layout is malformed or does not fit the tensor or mesh it is used with.
DTENSOR_DEFINE_ERROR(LayoutError);
// The operation has no rule for the given layouts or dtypes.
DTENSOR_DEFINE_ERROR(UnimplementedError);
// Reading or writing a file failed, or its contents are corrupt.
DTENSOR_DEFINE_ERROR(IoError);
// A collective or the transport under it failed.
DTENSOR_DEFINE_ERROR(CommunicationError);
// An internal invariant does not hold: a bug in dtensor, not in the caller's program.
DTENSOR_DEFINE_ERROR(InternalError);

#undef DTENSOR_DEFINE_ERROR

// Throws E with the message "[function] <formatted>", e.g.
//   throw_error<ShapeError>("matmul", "inner dims differ: {} vs {}", a, b);
template <typename E, typename... Args>
[[noreturn]] void throw_error(const std::string& function, fmt::format_string<Args...> format,
                              Args&&... args) {
  throw E(function, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace dtensor

// Checks an internal invariant; a failure is a bug in dtensor and throws InternalError.
#define DTENSOR_CHECK(cond)                                                                  \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::dtensor::throw_error<::dtensor::InternalError>(__func__, "check failed: {} ({}:{})", \
                                                       #cond, __FILE__, __LINE__);           \
  } while (0)
