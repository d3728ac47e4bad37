// --precision=float32|mixed_bfloat16 for the examples and benchmarks (ops/precision.h).
//
//   std::string precision = "float32";
//   add_precision_flag(cli, &precision);
//   ... parse ...
//   PolicyScope policy(Policy::from_name(precision));   // the rest of run() on this thread
#pragma once

#include <string>

#include "cli/flags.h"

namespace dtensor::cli {

// Adds --precision; a value Policy::from_name rejects is a flag error with its message.
void add_precision_flag(Flags& flags, std::string* value);

}  // namespace dtensor::cli
