#include "runtime/tensor.h"

#include <catch2/catch.hpp>

#include <cstdint>

using namespace dtensor;

TEST_CASE("dtype sizes and names round-trip") {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    CHECK(parse_dtype(dtype_name(d)) == d);
  }
  CHECK(dtype_size(DType::kF32) == 4);
  CHECK(dtype_size(DType::kF64) == 8);
  CHECK(dtype_size(DType::kBF16) == 2);
  CHECK(dtype_size(DType::kI32) == 4);
  CHECK(dtype_size(DType::kI64) == 8);
  CHECK(dtype_size(DType::kBool) == 1);
  CHECK(is_floating(DType::kBF16));
  CHECK_FALSE(is_floating(DType::kI32));
  CHECK(is_integer(DType::kI64));
}

TEST_CASE("parse_dtype rejects unknown names") {
  CHECK_THROWS_MATCHES(
      parse_dtype("f16"), InvalidArgumentError,
      Catch::Message(
          "[parse_dtype] unknown dtype 'f16' (expected f32, f64, bf16, i32, i64, bool)"));
}

TEST_CASE("bfloat16 rounds to nearest even and keeps NaN") {
  CHECK(static_cast<float>(BFloat16(1.0f)) == 1.0f);
  CHECK(static_cast<float>(BFloat16(-2.5f)) == -2.5f);
  // 1 + 2^-8 is halfway between two bf16 values: rounds to the even one, 1.0.
  CHECK(static_cast<float>(BFloat16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(static_cast<float>(BFloat16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  float nan = static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()));
  CHECK(nan != nan);
}

TEST_CASE("tensor storage is 64-byte aligned and sized") {
  for (int64_t n : {0, 1, 3, 17, 1000}) {
    Tensor t = Tensor::empty({n, 3}, DType::kF64, Device{DeviceType::kCPU, 2});
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
    CHECK(t.num_elements() == n * 3);
    CHECK(t.nbytes() == static_cast<size_t>(n * 3 * 8));
    CHECK(t.device() == Device{DeviceType::kCPU, 2});
  }
}

TEST_CASE("tensor handles share storage; clone copies") {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  CHECK(a.is_unique());
  Tensor b = a;
  CHECK_FALSE(a.is_unique());
  b.data<float>()[4] = 7.0f;
  CHECK(a.data<float>()[4] == 7.0f);
  Tensor c = a.clone();
  c.data<float>()[4] = 1.0f;
  CHECK(a.data<float>()[4] == 7.0f);
  CHECK_FALSE(c.shares_storage_with(a));
  CHECK(bitwise_equal(a, b));
  CHECK_FALSE(bitwise_equal(a, c));
  CHECK(a.to_string() == "f32[2,3]@CPU:0");
}

TEST_CASE("typed access checks the dtype") {
  Tensor t = Tensor::zeros({4}, DType::kI32);
  CHECK_THROWS_MATCHES(t.data<float>(), DTypeError,
                       Catch::Message("[Tensor::data] requested f32 from a i32[4]@CPU:0 tensor"));
}

TEST_CASE("reshape keeps the element count") {
  Tensor t = Tensor::zeros({2, 6}, DType::kF32);
  CHECK(t.reshaped({3, 4}).shape() == Shape{3, 4});
  CHECK(t.reshaped({3, 4}).shares_storage_with(t));
  CHECK_THROWS_MATCHES(t.reshaped({5}), ShapeError,
                       Catch::Message("[Tensor::reshaped] cannot reshape f32[2,6]@CPU:0 to [5]"));
}

TEST_CASE("leading_view reads rows in place, aligned, never unique, and outlives its parent") {
  Tensor t = Tensor::empty({8, 16}, DType::kF32);  // rows of 64 bytes
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  std::optional<Tensor> rows = t.leading_view(2, 5);
  REQUIRE(rows.has_value());
  CHECK(rows->shape() == Shape{3, 16});
  CHECK(rows->data<float>()[0] == 32.0f);
  CHECK(rows->raw_data() == static_cast<char*>(t.raw_data()) + 2 * 64);
  CHECK_FALSE(rows->is_unique());  // copy-on-write code must not write through it
  CHECK(t.leading_view(3, 3)->num_elements() == 0);
  CHECK(t.leading_view(0, 8)->is_same_as(t));
  // Rows of 12 bytes: row 1 would start misaligned, so there is no view.
  Tensor narrow = Tensor::zeros({8, 3}, DType::kF32);
  CHECK_FALSE(narrow.leading_view(1, 4).has_value());
  CHECK(narrow.leading_view(0, 2).has_value());
  // The view keeps the bytes alive after the parent handle is gone.
  Tensor kept = *t.leading_view(7, 8);
  t = Tensor();
  CHECK(kept.data<float>()[15] == 127.0f);
  CHECK_THROWS_MATCHES(
      kept.leading_view(0, 2), ShapeError,
      Catch::Message("[Tensor::leading_view] rows [0, 2) are outside f32[1,16]@CPU:0"));
  CHECK_THROWS_MATCHES(
      Tensor::zeros({}, DType::kF32).leading_view(0, 0), ShapeError,
      Catch::Message("[Tensor::leading_view] rows [0, 0) are outside f32[]@CPU:0"));
}

TEST_CASE("negative dims are rejected") {
  CHECK_THROWS_MATCHES(Tensor::empty({2, -1}, DType::kF32), ShapeError,
                       Catch::Message("[Tensor::empty] negative dim in shape [2,-1]"));
}

TEST_CASE("shape helpers") {
  CHECK(num_elements({}) == 1);
  CHECK(num_elements({2, 0, 3}) == 0);
  CHECK(row_major_strides({2, 3, 4}) == std::vector<int64_t>{12, 4, 1});
  CHECK(shape_to_string({2, 3}) == "[2,3]");
  CHECK(device_to_string({DeviceType::kGPU, 1}) == "GPU:1");
  CHECK(parse_device_type("CPU") == DeviceType::kCPU);
  CHECK_THROWS_MATCHES(
      parse_device_type("TPU"), InvalidArgumentError,
      Catch::Message("[parse_device_type] unknown device type 'TPU' (CPU or GPU)"));
}

TEST_CASE("regression: element counts that overflow int64 are a ShapeError") {
  using Catch::Message;
  const int64_t big = int64_t{1} << 40;
  // Used to wrap around to 0 elements: a 0-byte tensor of shape [2^40,2^40].
  CHECK_THROWS_MATCHES(Tensor::empty({big, big}, DType::kF32), ShapeError,
                       Message("[Tensor::empty] shape [1099511627776,1099511627776] has too many "
                               "elements (at most 1125899906842624 are supported)"));
  CHECK_THROWS_MATCHES(Tensor::zeros({4, big, big, 0}, DType::kF32), ShapeError,
                       Message("[Tensor::empty] shape [4,1099511627776,1099511627776,0] has too "
                               "many elements (at most 1125899906842624 are supported)"));
  CHECK_THROWS_MATCHES(num_elements({big, big}), ShapeError,
                       Message("[num_elements] element count of shape "
                               "[1099511627776,1099511627776] overflows int64"));
  CHECK(num_elements({big, big, 0}) == 0);
  CHECK(Tensor::empty({big, 0}, DType::kF32).num_elements() == 0);
  int64_t out = 0;
  CHECK_FALSE(checked_mul(INT64_MAX, 2, &out));
  CHECK_FALSE(checked_add(INT64_MAX, 1, &out));
  CHECK(checked_mul(big, 4, &out));
  CHECK(out == int64_t{1} << 42);
}

TEST_CASE("regression: buffers too large to allocate are an InvalidArgumentError, not bad_alloc") {
  using Catch::Message;
  CHECK_THROWS_MATCHES(Tensor::empty({int64_t{1} << 40}, DType::kF32), InvalidArgumentError,
                       Message("[Tensor::empty] a buffer of shape [1099511627776] with 4-byte "
                               "elements needs 4398046511104 bytes; at most 1099511627776 are "
                               "supported"));
  // 512 GiB: within the limit, beyond this machine's memory (heuristic overcommit refuses it).
  CHECK_THROWS_MATCHES(Tensor::empty({int64_t{1} << 37}, DType::kF32), InvalidArgumentError,
                       Message("[Tensor::empty] cannot allocate 549755813888 bytes for "
                               "f32[137438953472]"));
}
