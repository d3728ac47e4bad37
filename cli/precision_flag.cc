#include "cli/precision_flag.h"

#include "ops/precision.h"
#include "runtime/error.h"

namespace dtensor::cli {

void add_precision_flag(Flags& flags, std::string* value) {
  flags.add_string("--precision", value,
                   "float32, or mixed_bfloat16: matmul, dense and conv2d in bf16 with f32 "
                   "accumulation, variables, gradients and the loss in f32",
                   [](const std::string& v) -> std::string {
                     try {
                       Policy::from_name(v);
                     } catch (const Error& e) {
                       return e.what();
                     }
                     return "";
                   });
}

}  // namespace dtensor::cli
