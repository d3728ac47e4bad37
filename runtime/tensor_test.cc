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

TEST_CASE("views of views share the first parent, which keeps the bytes alive") {
  Tensor t = Tensor::empty({8, 16}, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor rows = *t.leading_view(2, 6);
  Tensor inner = *rows.leading_view(1, 3);  // rows 3 and 4 of t
  CHECK(inner.raw_data() == static_cast<char*>(t.raw_data()) + 3 * 64);
  rows = Tensor();
  t = Tensor();
  CHECK(inner.data<float>()[0] == 48.0f);
  CHECK(inner.data<float>()[31] == 79.0f);
  CHECK_FALSE(inner.is_unique());
  CHECK(inner.holders() == -1);
}

TEST_CASE("joined_view puts adjacent views of one buffer back together, in order only") {
  Tensor t = Tensor::empty({8, 16}, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  const Tensor a = *t.leading_view(0, 2), b = *t.leading_view(2, 3), c = *t.leading_view(3, 8);
  const Tensor empty = *t.leading_view(3, 3);
  const Device cpu3{DeviceType::kCPU, 3};
  std::optional<Tensor> all = Tensor::joined_view({&a, &b, &empty, &c}, cpu3);
  REQUIRE(all.has_value());
  CHECK(all->shape() == Shape{8, 16});
  CHECK(all->device() == cpu3);
  CHECK(all->raw_data() == t.raw_data());
  CHECK(bitwise_equal(*all, t));
  CHECK_FALSE(all->is_unique());  // a view: copy-on-write code must not write through it
  CHECK_FALSE(all->shares_storage_with(t));
  std::optional<Tensor> tail = Tensor::joined_view({&b, &c}, Device{});
  REQUIRE(tail.has_value());
  CHECK(tail->shape() == Shape{6, 16});
  CHECK(tail->data<float>()[0] == 32.0f);
  // Joined from views of views (rows 2..6 of t, then rows 6..8).
  const Tensor mid = *t.leading_view(2, 6);
  const Tensor mid_rows = *mid.leading_view(0, 4), last = *t.leading_view(6, 8);
  CHECK(Tensor::joined_view({&mid_rows, &last}, Device{}).has_value());
  // Out of order, with a gap, of other buffers, other dtypes or dims, or not views: no view.
  CHECK_FALSE(Tensor::joined_view({&b, &a, &c}, Device{}).has_value());
  CHECK_FALSE(Tensor::joined_view({&a, &c}, Device{}).has_value());
  Tensor other = Tensor::empty({8, 16}, DType::kF32);
  const Tensor foreign = *other.leading_view(2, 3);
  CHECK_FALSE(Tensor::joined_view({&a, &foreign}, Device{}).has_value());
  const Tensor narrow = b.reshaped({2, 8});
  CHECK_FALSE(Tensor::joined_view({&a, &narrow}, Device{}).has_value());
  CHECK_FALSE(Tensor::joined_view({&t}, Device{}).has_value());
  const Tensor scalar = Tensor::zeros({}, DType::kF32);
  CHECK_FALSE(Tensor::joined_view({&scalar}, Device{}).has_value());
  CHECK_THROWS_MATCHES(Tensor::joined_view({}, Device{}), ShapeError,
                       Catch::Message("[Tensor::joined_view] no parts to join"));
  // The joined view keeps the buffer alive after every other handle is gone.
  t = Tensor();
  std::optional<Tensor> kept = Tensor::joined_view({&b, &c}, Device{});
  REQUIRE(kept.has_value());
  CHECK(kept->data<float>()[16 * 6 - 1] == 127.0f);
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
