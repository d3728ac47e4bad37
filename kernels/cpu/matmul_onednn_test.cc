// The CPU matmul kernels through oneDNN: results equal the f64 reference exactly on values whose
// products and sums f32 holds exactly (multiples of 1/64), for every transpose, batch broadcast,
// epilogue and dtype; the primitive cache under concurrent callers and past its capacity.
#include "kernels/cpu/matmul_onednn.h"

#include <catch2/catch.hpp>

#include <random>
#include <thread>

#include "kernels/kernels.h"

using namespace dtensor;

namespace {

Tensor values(const Shape& shape, uint64_t seed, DType dtype = DType::kF32) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> q(-64, 64);
  Tensor t = Tensor::empty(shape, DType::kF64);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = q(rng) / 64.0;
  return kernels::cast(t, dtype);
}

Tensor f64(const Tensor& t) { return kernels::cast(t, DType::kF64); }

void require_equal(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const Tensor a = f64(got), b = f64(want);
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    REQUIRE(a.data<double>()[i] == b.data<double>()[i]);
  }
}

// The reference: the same product in f64 (through OpenBLAS), rounded to `dtype`.
Tensor reference(const Tensor& a, const Tensor& b, const kernels::MatmulOptions& o, DType dtype) {
  return kernels::cast(kernels::matmul(f64(a), f64(b), o), dtype);
}

}  // namespace

TEST_CASE("oneDNN has an optimised f32 kernel here", "[onednn]") {
  const kernels::cpu::onednn::GemmShape shape{16, 700, 784, false, false, DType::kF32};
  const std::string impl = kernels::cpu::onednn::implementation(shape, {});
  INFO(impl);
  CHECK(!impl.empty());
  CHECK(impl.find("ref") == std::string::npos);
}

TEST_CASE("f32 and bf16 matmul through oneDNN equal the f64 reference", "[onednn]") {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (int threads : {0, 1, 2}) {
          INFO(dtype_name(dtype) << " ta=" << ta << " tb=" << tb << " threads=" << threads);
          const kernels::MatmulOptions o{ta, tb, threads};
          // 2-D, batched, and a 2-D weight broadcast over a batch (folded into one gemm).
          const Tensor a = values(ta ? Shape{37, 13} : Shape{13, 37}, 1, dtype);
          const Tensor b = values(tb ? Shape{35, 37} : Shape{37, 35}, 2, dtype);
          require_equal(kernels::matmul(a, b, o), reference(a, b, o, dtype));
          const Tensor ab = values(ta ? Shape{3, 37, 5} : Shape{3, 5, 37}, 3, dtype);
          const Tensor bb = values(tb ? Shape{1, 35, 37} : Shape{1, 37, 35}, 4, dtype);
          require_equal(kernels::matmul(ab, bb, o), reference(ab, bb, o, dtype));
          require_equal(kernels::matmul(ab, b, o), reference(ab, b, o, dtype));
        }
      }
    }
  }
}

TEST_CASE("matmul_accumulate adds through oneDNN's sum post-op", "[onednn]") {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor a = values({9, 21}, 5, dtype), b = values({21, 6}, 6, dtype);
    const Tensor start = values({9, 6}, 7);
    Tensor out = kernels::cast(start, DType::kF32);
    out = kernels::scale(out, 1.0);  // a buffer of its own
    kernels::matmul_accumulate(a, b, out);
    const Tensor want = kernels::cast(
        kernels::binary(kernels::BinaryOp::kAdd, kernels::matmul(f64(a), f64(b)), f64(start)),
        DType::kF32);
    require_equal(out, want);
  }
}

TEST_CASE("dense fuses bias and relu through oneDNN", "[onednn]") {
  using kernels::UnaryOp;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor x = values({2, 7, 30}, 8, dtype), w = values({30, 12}, 9, dtype);
    const Tensor bias = values({12}, 10, dtype);
    for (std::optional<UnaryOp> act :
         {std::optional<UnaryOp>(), std::optional<UnaryOp>(UnaryOp::kRelu),
          std::optional<UnaryOp>(UnaryOp::kTanh)}) {
      const Tensor sum =
          kernels::binary(kernels::BinaryOp::kAdd, kernels::matmul(f64(x), f64(w)), f64(bias));
      // The f32 result (exact), then the activation in f32, then the output dtype.
      Tensor want = kernels::cast(sum, DType::kF32);
      if (act) want = kernels::unary(*act, want);
      require_equal(kernels::dense(x, w, &bias, act), kernels::cast(want, dtype));
      require_equal(
          kernels::dense(x, w, nullptr, act),
          kernels::cast(
              act ? kernels::unary(*act, kernels::matmul(kernels::cast(x, DType::kF32),
                                                         kernels::cast(w, DType::kF32)))
                  : kernels::matmul(kernels::cast(x, DType::kF32), kernels::cast(w, DType::kF32)),
              dtype));
    }
  }
}

TEST_CASE("products large enough for two threads run as blocks on the pool", "[onednn]") {
  using kernels::UnaryOp;
  // Tall (split by rows) and wide (split by columns, the bias split with them).
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{128, 200}, {20, 1000}}) {
    for (bool ta : {false, true}) {
      const Tensor x = values(ta ? Shape{300, m} : Shape{m, 300}, 11);
      const Tensor w = values({300, n}, 12), bias = values({n}, 13);
      const kernels::MatmulOptions o{ta, false, 2};
      const Tensor sum =
          kernels::binary(kernels::BinaryOp::kAdd, kernels::matmul(f64(x), f64(w), o), f64(bias));
      const Tensor want = kernels::unary(UnaryOp::kRelu, kernels::cast(sum, DType::kF32));
      require_equal(kernels::dense(x, w, &bias, UnaryOp::kRelu, o), want);
    }
  }
}

TEST_CASE("the primitive cache serves concurrent callers and many shapes", "[onednn]") {
  // More shapes than one thread's cache holds, on four threads with different thread counts.
  // The references first, on this thread: OpenBLAS is not called concurrently here.
  const Tensor b = values({17, 5}, 99);
  std::vector<Tensor> as, wants;
  for (int64_t m = 1; m <= 40; ++m) {
    as.push_back(values({m, 17}, static_cast<uint64_t>(m)));
    wants.push_back(kernels::matmul(f64(as.back()), f64(b)));
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures, &as, &wants, &b] {
      for (int round = 0; round < 2; ++round) {
        for (size_t c = 0; c < as.size(); ++c) {
          const kernels::MatmulOptions o{false, false, 1 + t % 2};
          const Tensor got = f64(kernels::matmul(as[c], b, o));
          const Tensor& want = wants[c];
          for (int64_t i = 0; i < got.num_elements(); ++i) {
            if (got.data<double>()[i] != want.data<double>()[i]) ++failures[static_cast<size_t>(t)];
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int f : failures) CHECK(f == 0);
}
