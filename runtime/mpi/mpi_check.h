// Turns MPI return codes into dtensor::CommunicationError with MPI's own error string.
#pragma once

#include <mpi.h>

#include <string>

#include "runtime/error.h"

namespace dtensor {

inline void check_mpi(int code, const char* function, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw_error<CommunicationError>(function, "{} failed: {}", call,
                                  length > 0 ? std::string(text, static_cast<size_t>(length))
                                             : "error code " + std::to_string(code));
}

}  // namespace dtensor
