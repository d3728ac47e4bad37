// oneDNN (2.6) single-matrix gemm for the CPU matmul kernels: c (+)= epilogue(a x b) with f32 or
// bf16 operands, f32 output and f32 accumulation, and the dense layer's epilogue (bias over the
// columns, ReLU) or matmul_accumulate's beta = 1 as post-ops of the same primitive.
//
// Primitives are created once per (shapes, transposes, dtypes, epilogue, thread count) and cached
// per calling thread (pool workers run kernels for several devices at once; a per-thread cache
// needs no lock). A hit scans a small array and allocates nothing: the primitive keeps its memory
// objects and its scratchpad, and each call only points them at the operands. A miss creates the
// primitive; when oneDNN has only a reference (unoptimised) kernel for a case, or none, the entry
// remembers that and gemm returns false, so the caller uses OpenBLAS.
//
// Threads: oneDNN here is built on OpenMP, and libgomp's idle team threads spin after every
// parallel call, taking the cores from the thread pool that runs the next op. So every primitive
// runs on one OpenMP thread (omp_set_num_threads(1), a per-thread setting), and a product worth
// `threads` threads is split into blocks of rows (or columns) run on ThreadPool::global(), the
// caller included (kernels/cpu/gemm_blocks.h, shared with the OpenBLAS half). Called from inside
// a pool task, a product runs whole on the calling thread.
//
// Thread-safe: different threads may call gemm concurrently.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace dtensor::kernels::cpu::onednn {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false;      // a holds [k, m], row-major
  bool transpose_b = false;      // b holds [n, k], row-major
  DType operands = DType::kF32;  // a's and b's dtype: kF32 or kBF16
};

struct Epilogue {
  const void* bias = nullptr;      // [n], added to every row; null for none
  DType bias_dtype = DType::kF32;  // kF32, or kBF16 with bf16 operands
  bool relu = false;               // max(0, .) after the bias
  bool accumulate = false;         // c += a x b (c's old values kept); no bias or relu with it
};

// c = epilogue(a x b) (c += a x b with accumulate) for dense row-major matrices, m, n, k >= 1,
// on up to `threads` >= 1 threads. Returns false, having done nothing, when oneDNN has no
// optimised kernel for the case.
bool gemm(const GemmShape& shape, const Epilogue& epilogue, const void* a, const void* b, float* c,
          int threads);

// What gemm would run for the case: the implementation name oneDNN reports ("brg:avx512_core",
// "gemm:jit", ...), or "" when gemm would return false. For the benchmark and tests.
const char* implementation(const GemmShape& shape, const Epilogue& epilogue);

}  // namespace dtensor::kernels::cpu::onednn
