// The thread split of one CPU matrix product, shared by the oneDNN and OpenBLAS halves of the
// matmul kernel: a product worth several threads is cut into blocks of rows of c (or of columns,
// when c is wider than tall and has fewer than 64 rows), each run by a single-threaded gemm on
// ThreadPool::global(), the caller included. Rows first: a block of rows is a dense matrix, which
// oneDNN runs on its brgemm kernels, where a block of columns (strided b and c) falls back to
// gemm:jit (bf16 128x784x700 on two blocks: 147 -> 172 GFLOP/s per core, the seed step 4% faster).
// A block of rows of a transposed-a product (the weight gradient) is strided and runs on
// gemm:jit too; there gemm:jit matches brgemm, and copying the block dense for brgemm made the
// seed step slower (docs/benchmarks.md, 2026-11-26).
// Also measured and not kept (bench/matmul_split, docs/benchmarks.md): blocks of columns copied
// dense for brgemm (same bits, no faster), one oneDNN call on two OpenMP threads (same bf16 bits,
// the seed step 35% slower: libgomp's spinning thread), and a weight packed for brgemm before
// each product (oneDNN's reorder costs more than the packing it saves).
//
// Why blocks and not the libraries' own threads: both oneDNN (OpenMP) and OpenBLAS (pthreads)
// leave their idle threads spinning after a call (libgomp's wait policy; OpenBLAS's thread
// timeout, about 2^28 cycles), and those spinners take the cores from the pool that runs the
// next op. Measured with bench/matmul on a 2-core host: one multi-threaded OpenBLAS call before
// a 512^3 runtime matmul halved the runtime's rate (227 -> 105 GFLOP/s) until its threads slept.
// So both libraries run on one thread per call, and the pool is the only source of threads.
//
// Thread-safe: called concurrently from any threads; from inside a pool task a product runs whole
// on the calling thread.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/thread_pool.h"

namespace dtensor::kernels::cpu {

// Below this many flops per block, waking the pool costs more than a second thread saves.
inline constexpr double kGemmSplitFlops = 4e6;

// One block of an [m, n] product: rows [begin, end) of c, or columns when !by_rows.
struct GemmBlock {
  int64_t begin = 0, end = 0;
  bool by_rows = true;
};

// Runs fn(block) for the blocks of an [m, n] x k product on up to `threads` threads: one block
// (the whole product, on the caller) when the product is small, the pool has one thread, or the
// caller is a pool task.
template <typename Fn>
void run_gemm_blocks(int64_t m, int64_t n, int64_t k, int threads, const Fn& fn) {
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  ThreadPool& pool = ThreadPool::global();
  const int64_t blocks = std::min<int64_t>(
      {threads, pool.num_threads(), static_cast<int64_t>(flops / kGemmSplitFlops), std::max(m, n)});
  const bool by_rows = m >= n || m >= 64;
  if (blocks <= 1 || ThreadPool::in_worker()) {
    fn(GemmBlock{0, by_rows ? m : n, by_rows});
    return;
  }
  const int64_t extent = by_rows ? m : n;
  // One captured reference: std::function keeps it inline, so the call allocates nothing.
  const auto run = [&](int64_t i) {
    fn(GemmBlock{extent * i / blocks, extent * (i + 1) / blocks, by_rows});
  };
  pool.parallel_for(blocks, [&run](int64_t i) { run(i); });
}

}  // namespace dtensor::kernels::cpu
