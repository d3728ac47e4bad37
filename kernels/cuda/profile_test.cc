// The GPU profile (profile.h): the switch's values, and a wrapped copy of the GPU table that
// counts and times the calls made through it (the process's own table stays unwrapped: the
// switch is read before main).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "kernels/cuda/profile.h"
#include "kernels/kernels.h"
#include "runtime/cuda/transfer.h"

using namespace dtensor;
using namespace dtensor::kernels;
using Catch::Message;

namespace {

// What print_gpu_profile writes, read back through a temporary file.
std::string printed_profile() {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  gpu::print_gpu_profile(f);
  std::string text;
  std::rewind(f);
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) text.push_back(static_cast<char>(c));
  std::fclose(f);
  return text;
}

}  // namespace

TEST_CASE("DTENSOR_GPU_PROFILE takes 0 or 1 and names any other value", "[host]") {
  CHECK_FALSE(gpu::parse_gpu_profile_switch(nullptr));
  CHECK_FALSE(gpu::parse_gpu_profile_switch(""));
  CHECK_FALSE(gpu::parse_gpu_profile_switch("0"));
  CHECK(gpu::parse_gpu_profile_switch("1"));
  CHECK_THROWS_MATCHES(gpu::parse_gpu_profile_switch("yes"), InvalidArgumentError,
                       Message("[DTENSOR_GPU_PROFILE] must be 0 or 1, got 'yes'"));
  // Set to nothing in this test's environment: the table was not wrapped.
  CHECK_FALSE(gpu::gpu_profile_enabled());
}

TEST_CASE("a profiled table counts each front call once, by op, and starts over after a print") {
  gpu::Table table = gpu::registered_table;
  gpu::profile_table(table);
  REQUIRE(table.unary != gpu::registered_table.unary);
  const Device gpu0{DeviceType::kGPU, 0};
  Tensor ones = Tensor::empty({64, 32}, DType::kF32);
  for (int64_t i = 0; i < ones.num_elements(); ++i) ones.data<float>()[i] = 1.5f;
  Tensor x = cuda::to_device(ones, gpu0);
  gpu::reset_gpu_profile();
  for (int i = 0; i < 3; ++i) x = table.unary(UnaryOp::kRelu, x);
  x = table.binary(BinaryOp::kAdd, x, x);
  Tensor host = table.copy_to_host(x);
  CHECK(host.data<float>()[0] == 3.0f);
  const std::string text = printed_profile();
  INFO(text);
  CHECK(text.find("5 front calls") != std::string::npos);
  CHECK(text.find("relu ") != std::string::npos);
  CHECK(text.find("         3 ") != std::string::npos);
  CHECK(text.find("add ") != std::string::npos);
  CHECK(text.find("copy_to_host") != std::string::npos);
  CHECK(printed_profile().empty());
}
