// How to cut one stacked product of the seed step over the pool's threads. For the forward and
// grad_x shapes at batch 128 (x [128,784] @ w1, h1 [128,700] @ w2, g2 [128,500] @ w2^T), oneDNN
// called directly with single-threaded primitives (but omp2), the blocks run on
// ThreadPool::global() as the runtime runs them (kernels/cpu/gemm_blocks.h):
//   whole      one call on the calling thread;
//   rows       two blocks of 64 rows, each call packing the whole weight (the runtime's rule);
//   columns    two blocks of columns (b and c strided), each packing half of the weight;
//   dense_cols the same with b's half and c's block copied dense, so that brgemm takes them;
//   packed     two blocks of rows reading one weight pre-packed in the primitive's own layout
//              (format `any`; packing not timed: the bound for a weight copy kept packed);
//   pack+rows  the same with the weight packed by a oneDNN reorder (one thread) before each call;
//   omp2       one call on two OpenMP threads, oneDNN splitting it itself (last in each round:
//              libgomp's team thread spins for a while after it).
// Each mode with the caches hot, and cold (64 MB written before every call, as Adam's pass over
// the parameters leaves them in the step). Prints GFLOP/s (medians of interleaved rounds), the
// implementation oneDNN picked, and whether the result's bits equal the rows mode's.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "runtime/thread_pool.h"

namespace {

using dnnl::memory;

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A [rows, cols] block of a row-major matrix with leading dim ld, or of the transpose of one.
memory::desc matrix(int64_t rows, int64_t cols, bool transposed, int64_t ld, memory::data_type t) {
  return memory::desc({rows, cols}, t, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
}

// One primitive for a block c[m, n] (ld ldc) = a[m, k] (ld lda) x b[k, n], on `threads` OpenMP
// threads (oneDNN fixes its split when the primitive is created).
struct Block {
  int threads = 1;
  dnnl::matmul primitive;
  memory::desc a, b, c;
  std::vector<uint8_t> scratchpad;
  memory::desc scratchpad_desc;
  std::string impl;

  Block(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldc,
        std::optional<memory::desc> b_plain, memory::data_type t, int omp_threads = 1)
      : threads(omp_threads),
        a(matrix(m, k, false, lda, t)),
        b(b_plain ? *b_plain : memory::desc({k, n}, t, memory::format_tag::any)),
        c(matrix(m, n, false, ldc, memory::data_type::f32)) {
    omp_set_num_threads(threads);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
    primitive = dnnl::matmul(pd);
    b = pd.weights_desc();
    scratchpad_desc = pd.scratchpad_desc();
    scratchpad.resize(scratchpad_desc.get_size());
    impl = pd.impl_info_str();
    omp_set_num_threads(1);
  }

  void run(const void* pa, const void* pb, float* pc) {
    omp_set_num_threads(threads);
    thread_local dnnl::stream stream(engine());
    auto handle = [](const void* p) { return const_cast<void*>(p); };
    primitive.execute(
        stream, {{DNNL_ARG_SRC, memory(a, engine(), handle(pa))},
                 {DNNL_ARG_WEIGHTS, memory(b, engine(), handle(pb))},
                 {DNNL_ARG_DST, memory(c, engine(), pc)},
                 {DNNL_ARG_SCRATCHPAD, memory(scratchpad_desc, engine(), scratchpad.data())}});
    omp_set_num_threads(1);
  }
};

struct Case {
  const char* step;
  int64_t m, n, k;
  bool tb;  // b stored [n, k]
};

void measure(const Case& c, bool bf16, int rounds) {
  const memory::data_type t = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const size_t esize = bf16 ? 2 : 4;
  const int64_t m = c.m, n = c.n, k = c.k, ldb = c.tb ? k : n, half = m / 2, n0 = n / 2;
  std::vector<float> af(static_cast<size_t>(m * k)), bf(static_cast<size_t>(k * n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : af) v = uniform(rng);
  for (float& v : bf) v = uniform(rng);
  auto stored = [&](const std::vector<float>& f) {  // bf16: the high halves (truncation)
    std::vector<uint8_t> out(f.size() * esize);
    for (size_t i = 0; i < f.size(); ++i)
      std::memcpy(&out[i * esize], reinterpret_cast<const char*>(&f[i]) + 4 - esize, esize);
    return out;
  };
  const std::vector<uint8_t> a = stored(af), b = stored(bf);
  const memory::desc b_whole = matrix(k, n, c.tb, ldb, t);
  auto b_cols = [&](int64_t cols) { return matrix(k, cols, c.tb, ldb, t); };
  const uint8_t* b_right = b.data() + static_cast<size_t>(n0 * (c.tb ? k : 1)) * esize;
  Block whole(m, n, k, k, n, b_whole, t);
  Block omp2(m, n, k, k, n, b_whole, t, 2);
  Block rows[2] = {Block(half, n, k, k, n, b_whole, t), Block(m - half, n, k, k, n, b_whole, t)};
  Block cols[2] = {Block(m, n0, k, k, n, b_cols(n0), t),
                   Block(m, n - n0, k, k, n, b_cols(n - n0), t)};
  Block packed[2] = {Block(half, n, k, k, n, std::nullopt, t),
                     Block(m - half, n, k, k, n, std::nullopt, t)};
  memory plain(b_whole, engine(), const_cast<uint8_t*>(b.data()));
  memory pack(packed[0].b, engine());
  dnnl::reorder reorder(plain, pack);
  auto pack_weight = [&] {
    omp_set_num_threads(1);
    thread_local dnnl::stream stream(engine());
    reorder.execute(stream, plain, pack);
    stream.wait();
  };
  pack_weight();
  // Dense columns: each thread copies its half of b dense (b untransposed; a transposed b's half
  // is a dense block of its rows already), runs into a dense [m, half] buffer and copies that
  // into c's columns: brgemm on both, each packing half of b.
  const int64_t widths[2] = {n0, n - n0};
  Block dense_cols[2] = {
      Block(m, n0, k, k, n0, matrix(k, n0, c.tb, c.tb ? k : n0, t), t),
      Block(m, n - n0, k, k, n - n0, matrix(k, n - n0, c.tb, c.tb ? k : n - n0, t), t)};
  std::vector<uint8_t> b_half[2] = {
      std::vector<uint8_t>(static_cast<size_t>(k * n0) * esize),
      std::vector<uint8_t>(static_cast<size_t>(k * (n - n0)) * esize)};
  std::vector<float> c_half[2] = {std::vector<float>(static_cast<size_t>(m * n0)),
                                  std::vector<float>(static_cast<size_t>(m * (n - n0)))};
  std::vector<float> out(static_cast<size_t>(m * n)), reference(out.size());
  auto dense_columns = [&](int64_t i) {
    const int64_t w = widths[i], first = i * n0;
    const uint8_t* pb = i == 0 ? b.data() : b_right;
    if (!c.tb) {
      for (int64_t r = 0; r < k; ++r) {
        std::memcpy(b_half[i].data() + static_cast<size_t>(r * w) * esize,
                    b.data() + static_cast<size_t>(r * n + first) * esize,
                    static_cast<size_t>(w) * esize);
      }
      pb = b_half[i].data();
    }
    dense_cols[i].run(a.data(), pb, c_half[i].data());
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(out.data() + r * n + first, c_half[i].data() + r * w,
                  static_cast<size_t>(w) * sizeof(float));
    }
  };
  dtensor::ThreadPool& pool = dtensor::ThreadPool::global();
  auto by_rows = [&](Block* blocks, const void* pb) {
    pool.parallel_for(2, [&](int64_t i) {
      blocks[i].run(a.data() + static_cast<size_t>(i * half * k) * esize, pb,
                    out.data() + i * half * n);
    });
  };
  struct Mode {
    const char* name;
    std::string impl;
    std::function<void()> run;
    std::vector<double> hot, cold;
    bool same_bits = false;
  };
  std::vector<Mode> modes = {
      {"whole", whole.impl, [&] { whole.run(a.data(), b.data(), out.data()); }, {}, {}},
      {"rows", rows[0].impl, [&] { by_rows(rows, b.data()); }, {}, {}},
      {"columns",
       cols[0].impl,
       [&] {
         pool.parallel_for(2, [&](int64_t i) {
           cols[i].run(a.data(), i == 0 ? b.data() : b_right, out.data() + i * n0);
         });
       },
       {},
       {}},
      {"dense_cols", dense_cols[0].impl, [&] { pool.parallel_for(2, dense_columns); }, {}, {}},
      {"packed", packed[0].impl, [&] { by_rows(packed, pack.get_data_handle()); }, {}, {}},
      {"pack+rows",
       packed[0].impl,
       [&] {
         pack_weight();
         by_rows(packed, pack.get_data_handle());
       },
       {},
       {}},
      {"omp2", omp2.impl, [&] { omp2.run(a.data(), b.data(), out.data()); }, {}, {}},
  };
  modes[1].run();
  reference = out;
  for (Mode& mode : modes) {
    std::fill(out.begin(), out.end(), -1.0f);
    mode.run();
    mode.same_bits = std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)) == 0;
  }
  std::vector<char> flush(64 << 20);
  auto cold_seconds = [&](const std::function<void()>& body) {
    std::vector<double> seconds;
    for (int i = 0; i < 15; ++i) {
      for (size_t j = 0; j < flush.size(); j += 64) ++flush[j];
      const auto start = std::chrono::steady_clock::now();
      body();
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + 7, seconds.end());
    return seconds[7];
  };
  for (int r = 0; r < rounds; ++r) {
    for (Mode& mode : modes) {
      mode.hot.push_back(dtensor::bench::median_seconds(mode.run, 31));
      mode.cold.push_back(cold_seconds(mode.run));
    }
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double flops = 2.0 * static_cast<double>(m * n * k);
  for (const Mode& mode : modes) {
    for (const bool cold : {false, true}) {
      dtensor::bench::report("matmul_split",
                             {{"step", std::string(c.step)},
                              {"dtype", std::string(bf16 ? "bf16" : "f32")},
                              {"m", m},
                              {"n", n},
                              {"k", k},
                              {"mode", std::string(mode.name)},
                              {"caches", std::string(cold ? "cold" : "hot")},
                              {"impl", mode.impl},
                              {"bits_equal_rows", int64_t{mode.same_bits}}},
                             flops / median(cold ? mode.cold : mode.hot) / 1e9, "GFLOP/s");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("matmul_split",
                            "Row, column and pre-packed splits of the seed step's stacked "
                            "products over two pool threads. Prints one JSON object per figure.");
  int64_t rounds = 5;
  flags.add_int("--rounds", &rounds, "interleaved rounds over the modes", 1, 1000);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const Case cases[] = {{"forward1", 128, 700, 784, false},
                        {"forward2", 128, 500, 700, false},
                        {"grad_x2", 128, 700, 500, true}};
  for (const bool bf16 : {true, false}) {
    for (const Case& c : cases) measure(c, bf16, static_cast<int>(rounds));
  }
  return 0;
}
