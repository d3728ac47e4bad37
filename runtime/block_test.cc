#include "runtime/block.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include "runtime/element_loops.h"

using namespace dtensor;
using Catch::Message;

TEST_CASE("copy_box moves an inner box between tensors of different shapes") {
  Tensor src = Tensor::empty({3, 4, 5}, DType::kI32);
  for (int i = 0; i < 60; ++i) src.data<int32_t>()[i] = i;
  Tensor dst = Tensor::zeros({2, 6, 3}, DType::kI32);
  copy_box(src, {1, 1, 2}, dst, {1, 2, 0}, {1, 2, 3});
  const int32_t* d = dst.data<int32_t>();
  // dst[1][2][0..3) = src[1][1][2..5), dst[1][3][0..3) = src[1][2][2..5)
  CHECK(d[1 * 18 + 2 * 3 + 0] == 20 + 5 + 2);
  CHECK(d[1 * 18 + 3 * 3 + 2] == 20 + 10 + 4);
  CHECK(d[0] == 0);
  Tensor whole = slice_box(src, {0, 0, 0}, {3, 4, 5});
  CHECK(bitwise_equal(whole, src));
  CHECK(slice_box(src, {2, 0, 0}, {0, 4, 5}).num_elements() == 0);
}

TEST_CASE("reduce_into handles every dtype") {
  Tensor a = Tensor::empty({2}, DType::kBF16);
  Tensor b = Tensor::empty({2}, DType::kBF16);
  a.data<BFloat16>()[0] = BFloat16(1.5f);
  a.data<BFloat16>()[1] = BFloat16(-2.0f);
  b.data<BFloat16>()[0] = BFloat16(2.0f);
  b.data<BFloat16>()[1] = BFloat16(-3.0f);
  reduce_into(a, b, ReduceOp::kSum);
  CHECK(static_cast<float>(a.data<BFloat16>()[0]) == 3.5f);
  CHECK(static_cast<float>(a.data<BFloat16>()[1]) == -5.0f);
  Tensor p = Tensor::zeros({2}, DType::kBool);
  Tensor q = Tensor::zeros({2}, DType::kBool);
  q.data<bool>()[1] = true;
  reduce_into(p, q, ReduceOp::kSum);
  CHECK(p.data<bool>()[1]);
  reduce_into(p, Tensor::zeros({2}, DType::kBool), ReduceOp::kMin);
  CHECK_FALSE(p.data<bool>()[1]);
}

TEST_CASE("block operations reject boxes and dtypes that do not fit") {
  Tensor src = Tensor::zeros({3, 4}, DType::kF32);
  Tensor dst = Tensor::zeros({2, 2}, DType::kF32);
  CHECK_THROWS_MATCHES(copy_box(src, {2, 0}, dst, {0, 0}, {2, 2}), ShapeError,
                       Message("[copy_box] source box at [2,0] of extent [2,2] does not fit "
                               "f32[3,4]@CPU:0"));
  CHECK_THROWS_MATCHES(copy_box(src, {0, 0}, dst, {1, 0}, {2, 2}), ShapeError,
                       Message("[copy_box] destination box at [1,0] of extent [2,2] does not fit "
                               "f32[2,2]@CPU:0"));
  Tensor ints = Tensor::zeros({2, 2}, DType::kI32);
  CHECK_THROWS_MATCHES(copy_box(src, {0, 0}, ints, {0, 0}, {2, 2}), DTypeError,
                       Message("[copy_box] source f32[3,4]@CPU:0 and destination i32[2,2]@CPU:0 "
                               "differ in dtype"));
  CHECK_THROWS_MATCHES(reduce_into(dst, src, ReduceOp::kSum), ShapeError,
                       Message("[reduce_into] cannot reduce f32[3,4]@CPU:0 into f32[2,2]@CPU:0"));
}

// The runtime links nothing from the kernels floor: no GPU table here, so GPU-tagged tensors (on
// host storage; nothing is allocated) reach the element loops' front and get its one error.
TEST_CASE("without a GPU table linked, block operations on GPU tensors get the front's error") {
  REQUIRE(kernels::gpu::element_loop_table == nullptr);
  const Device gpu{DeviceType::kGPU, 0};
  Tensor src = Tensor::zeros({2, 3}, DType::kF32).with_device(gpu);
  Tensor dst = Tensor::zeros({2, 3}, DType::kF32).with_device(gpu);
  CHECK_THROWS_MATCHES(copy_box(src, {0, 0}, dst, {0, 0}, {2, 3}), UnimplementedError,
                       Message("[copy_box] has no GPU kernel in this build"));
  CHECK_THROWS_MATCHES(reduce_into(dst, src, ReduceOp::kMax), UnimplementedError,
                       Message("[reduce_into] has no GPU kernel in this build"));
  CHECK_THROWS_MATCHES(copy_box(Tensor::zeros({2, 3}, DType::kF32), {0, 0}, dst, {0, 0}, {2, 3}),
                       InvalidArgumentError,
                       Message("[copy_box] inputs are on CPU:0 and GPU:0 (f32[2,3] and f32[2,3]); "
                               "a kernel runs on one device type"));
}

TEST_CASE("shared zeros are read-only zeros that sums skip") {
  Tensor big = Tensor::shared_zeros({300, 500}, DType::kF32, Device{DeviceType::kCPU, 3});
  Tensor small = Tensor::shared_zeros({7}, DType::kBF16);
  CHECK(big.is_shared_zeros());
  CHECK(big.device().id == 3);
  CHECK_FALSE(big.is_unique());  // no caller may take it for a private buffer to write
  for (int64_t i = 0; i < big.num_elements(); ++i) REQUIRE(big.data<float>()[i] == 0.0f);
  CHECK(static_cast<float>(small.data<BFloat16>()[6]) == 0.0f);
  CHECK_FALSE(Tensor::zeros({4}, DType::kF32).is_shared_zeros());
  CHECK_FALSE(big.clone().is_shared_zeros());
  CHECK(slice_box(big, {10, 20}, {5, 5}).is_shared_zeros());
  CHECK_THROWS_MATCHES(slice_box(big, {299, 0}, {2, 5}), ShapeError,
                       Message("[copy_box] source box at [299,0] of extent [2,5] does not fit "
                               "f32[300,500]@CPU:3"));

  Tensor a = Tensor::empty({2, 3}, DType::kF32), b = Tensor::empty({2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) {
    a.data<float>()[i] = static_cast<float>(i) + 0.25f;
    b.data<float>()[i] = -2.0f * static_cast<float>(i);
  }
  Tensor z = Tensor::shared_zeros({2, 3}, DType::kF32);
  // One term left: the sum is that term itself, no copy.
  Tensor one = reduce_tensors({z, a, z, z}, ReduceOp::kSum);
  CHECK(one.shares_storage_with(a));
  // Several left: their sum, as if the zeros were not there.
  CHECK(bitwise_equal(reduce_tensors({z, a, z, b}, ReduceOp::kSum),
                      reduce_tensors({a, b}, ReduceOp::kSum)));
  CHECK(reduce_tensors({z, z}, ReduceOp::kSum).is_shared_zeros());
  // Max and min have another identity: zeros are real operands there.
  Tensor m = reduce_tensors({z, b}, ReduceOp::kMax);
  CHECK_FALSE(m.shares_storage_with(b));
  CHECK(m.data<float>()[0] == 0.0f);
  CHECK(m.data<float>()[1] == 0.0f);
  CHECK(reduce_tensors({z, b}, ReduceOp::kMin).data<float>()[1] == -2.0f);
}

TEST_CASE("regression: integer sums wrap instead of overflowing (UBSan signed overflow)") {
  Tensor a = Tensor::empty({3}, DType::kI32);
  Tensor b = Tensor::empty({3}, DType::kI32);
  const int32_t av[] = {INT32_MAX, INT32_MIN, 5};
  const int32_t bv[] = {1, -1, -7};
  std::copy(av, av + 3, a.data<int32_t>());
  std::copy(bv, bv + 3, b.data<int32_t>());
  // The single-device sum accumulates in i64 and truncates: the same as wrapping in i32.
  Tensor sum = reduce_tensors({a, b}, ReduceOp::kSum);
  CHECK(sum.data<int32_t>()[0] == INT32_MIN);
  CHECK(sum.data<int32_t>()[1] == INT32_MAX);
  CHECK(sum.data<int32_t>()[2] == -2);
  Tensor c = Tensor::empty({1}, DType::kI64);
  Tensor d = Tensor::empty({1}, DType::kI64);
  c.data<int64_t>()[0] = INT64_MAX;
  d.data<int64_t>()[0] = 2;
  reduce_into(c, d, ReduceOp::kSum);
  CHECK(c.data<int64_t>()[0] == INT64_MIN + 1);
}

TEST_CASE("regression: block ranges that overflow are rejected") {
  using Catch::Message;
  Tensor src = Tensor::zeros({4}, DType::kF32);
  Tensor dst = Tensor::zeros({4}, DType::kF32);
  CHECK_THROWS_MATCHES(copy_box(src, {1}, dst, {0}, {INT64_MAX}), ShapeError,
                       Message("[copy_box] source box at [1] of extent [9223372036854775807] does "
                               "not fit f32[4]@CPU:0"));
  CHECK_THROWS_MATCHES(slice_box(src, {INT64_MAX}, {1}), ShapeError,
                       Message("[copy_box] source box at [9223372036854775807] of extent [1] does "
                               "not fit f32[4]@CPU:0"));
  CHECK_THROWS_MATCHES(reduce_range(dst, src, ReduceOp::kSum, 2, 9), ShapeError,
                       Message("[reduce_into] element range [2, 9) does not fit f32[4]@CPU:0"));
}
