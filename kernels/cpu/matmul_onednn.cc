#include "kernels/cpu/matmul_onednn.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <dnnl.hpp>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_blocks.h"

namespace dtensor::kernels::cpu::onednn {
namespace {

// Everything that fixes a primitive: one block of the product, with the leading dims of the full
// matrices it lies in. Compared field by field on every call: keep it small.
struct Key {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType operands = DType::kF32;
  DType bias_dtype = DType::kF32;
  bool transpose_a = false, transpose_b = false, bias = false, relu = false, accumulate = false;
  bool accept_reference = false;  // a block of a product whose whole has an optimised kernel

  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
           operands == o.operands && bias_dtype == o.bias_dtype && transpose_a == o.transpose_a &&
           transpose_b == o.transpose_b && bias == o.bias && relu == o.relu &&
           accumulate == o.accumulate && accept_reference == o.accept_reference;
  }
};

// The key of the whole product (leading dims of dense row-major matrices).
Key make_key(const GemmShape& s, const Epilogue& e) {
  Key key;
  key.m = s.m;
  key.n = s.n;
  key.k = s.k;
  key.lda = s.transpose_a ? s.m : s.k;
  key.ldb = s.transpose_b ? s.k : s.n;
  key.ldc = s.n;
  key.operands = s.operands;
  key.bias = e.bias != nullptr;
  key.bias_dtype = key.bias ? e.bias_dtype : DType::kF32;
  key.transpose_a = s.transpose_a;
  key.transpose_b = s.transpose_b;
  key.relu = e.relu;
  key.accumulate = e.accumulate;
  return key;
}

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::data_type data_type(DType dtype) {
  return dtype == DType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// A [rows, cols] block of a row-major matrix with leading dim ld, or of the transpose of one.
dnnl::memory::desc matrix(int64_t rows, int64_t cols, bool transposed, int64_t ld, DType dtype) {
  const dnnl::memory::dims strides =
      transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, data_type(dtype), strides);
}

// One cached primitive with the memory objects its calls re-point at the operands.
struct Entry {
  Key key;
  bool usable = false;  // false: no optimised kernel; the caller falls back
  std::string impl;
  dnnl::matmul primitive;
  dnnl::memory src, weights, bias, dst, scratchpad;
  std::vector<uint8_t> scratchpad_buffer;
  std::array<dnnl_exec_arg_t, 5> args{};
  int num_args = 0;

  explicit Entry(const Key& k) : key(k) {
    try {
      create();
    } catch (const dnnl::error&) {
      usable = false;  // unimplemented or unsupported combination
    }
  }

  void create() {
    const dnnl::engine& engine = cpu_engine();
    const dnnl::memory::desc a = matrix(key.m, key.k, key.transpose_a, key.lda, key.operands);
    const dnnl::memory::desc b = matrix(key.k, key.n, key.transpose_b, key.ldb, key.operands);
    const dnnl::memory::desc c = matrix(key.m, key.n, false, key.ldc, DType::kF32);
    dnnl::post_ops ops;
    if (key.accumulate) ops.append_sum(1.0f);
    if (key.relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    // Our own scratchpad: a call then allocates nothing.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::memory::desc bias_desc =
        key.bias ? matrix(1, key.n, false, key.n, key.bias_dtype) : dnnl::memory::desc();
    const dnnl::matmul::desc desc =
        key.bias ? dnnl::matmul::desc(a, b, bias_desc, c) : dnnl::matmul::desc(a, b, c);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine);
    impl = pd.impl_info_str();
    // A reference kernel is one loop per element: OpenBLAS is far faster there.
    if (!key.accept_reference && impl.find("ref") != std::string::npos) return;
    primitive = dnnl::matmul(pd);
    src = dnnl::memory(a, engine, nullptr);
    weights = dnnl::memory(b, engine, nullptr);
    dst = dnnl::memory(c, engine, nullptr);
    scratchpad_buffer.resize(pd.scratchpad_desc().get_size());
    scratchpad = dnnl::memory(pd.scratchpad_desc(), engine,
                              scratchpad_buffer.empty() ? nullptr : scratchpad_buffer.data());
    args[0] = {DNNL_ARG_SRC, src.get()};
    args[1] = {DNNL_ARG_WEIGHTS, weights.get()};
    args[2] = {DNNL_ARG_DST, dst.get()};
    args[3] = {DNNL_ARG_SCRATCHPAD, scratchpad.get()};
    num_args = 4;
    if (key.bias) {
      bias = dnnl::memory(bias_desc, engine, nullptr);
      args[4] = {DNNL_ARG_BIAS, bias.get()};
      num_args = 5;
    }
    usable = true;
  }
};

// The calling thread's primitives and stream. Bounded: a new case past kCapacity replaces the
// entries in turn.
class Cache {
 public:
  Entry& get(const Key& key) {
    for (size_t i = 0; i < size_; ++i) {
      if (entries_[i]->key == key) return *entries_[i];
    }
    std::unique_ptr<Entry> entry = std::make_unique<Entry>(key);
    size_t slot = size_;
    if (size_ < kCapacity) {
      ++size_;
    } else {
      slot = next_victim_;
      next_victim_ = (next_victim_ + 1) % kCapacity;
    }
    entries_[slot] = std::move(entry);
    return *entries_[slot];
  }

  dnnl::stream& stream() {
    if (!stream_) stream_ = dnnl::stream(cpu_engine());
    return stream_;
  }

 private:
  static constexpr size_t kCapacity = 32;
  std::array<std::unique_ptr<Entry>, kCapacity> entries_;
  size_t size_ = 0;
  size_t next_victim_ = 0;
  dnnl::stream stream_;
};

Cache& thread_cache() {
  thread_local Cache cache;
  return cache;
}

// Every call runs oneDNN on one OpenMP thread. With more, libgomp's idle team threads spin
// after each call (its default wait policy, fixed when the library loads) and take the cores
// from the pool workers that run the next op: the seed step ran 3x slower. A product that may use
// several threads is split into blocks on the thread pool instead, one single-threaded primitive
// per block.
void use_one_omp_thread() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

// Runs one block; the entry exists and is usable.
void execute(Entry& entry, dnnl::stream& stream, const void* a, const void* b, const void* bias,
             float* c) {
  entry.src.set_data_handle(const_cast<void*>(a));
  entry.weights.set_data_handle(const_cast<void*>(b));
  entry.dst.set_data_handle(c);
  if (bias != nullptr) entry.bias.set_data_handle(const_cast<void*>(bias));
  const dnnl_status_t status = dnnl_primitive_execute(entry.primitive.get(), stream.get(),
                                                      entry.num_args, entry.args.data());
  // The operands were valid for a primitive created for them: a failure here is a bug.
  if (status != dnnl_success) std::abort();
}

// Runs `block` of the product (the whole one, or a part of it cut by run_gemm_blocks) with one
// single-threaded primitive on the calling thread.
void run_block(const GemmShape& shape, const Epilogue& epilogue, const Key& whole,
               const GemmBlock& part, const void* a, const void* b, float* c) {
  use_one_omp_thread();
  Cache& mine = thread_cache();
  const bool all = part.begin == 0 && part.end == (part.by_rows ? shape.m : shape.n);
  if (all) {
    execute(mine.get(whole), mine.stream(), a, b, epilogue.bias, c);
    return;
  }
  const size_t esize = shape.operands == DType::kBF16 ? 2 : 4;
  const size_t bias_size = epilogue.bias_dtype == DType::kBF16 ? 2 : 4;
  Key key = whole;
  key.accept_reference = true;
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  const char* pbias = static_cast<const char*>(epilogue.bias);
  float* pc = c;
  if (part.by_rows) {
    key.m = part.end - part.begin;
    pa += static_cast<size_t>(part.begin * (shape.transpose_a ? 1 : shape.k)) * esize;
    pc += part.begin * shape.n;
  } else {
    key.n = part.end - part.begin;
    pb += static_cast<size_t>(part.begin * (shape.transpose_b ? shape.k : 1)) * esize;
    pc += part.begin;
    if (pbias != nullptr) pbias += static_cast<size_t>(part.begin) * bias_size;
  }
  Entry& block = mine.get(key);
  if (!block.usable) std::abort();  // the whole product has a kernel, so its blocks do
  execute(block, mine.stream(), pa, pb, pbias, pc);
}

}  // namespace

bool gemm(const GemmShape& shape, const Epilogue& epilogue, const void* a, const void* b, float* c,
          int threads) {
  use_one_omp_thread();
  const Key whole = make_key(shape, epilogue);
  if (!thread_cache().get(whole).usable) return false;
  run_gemm_blocks(shape.m, shape.n, shape.k, threads,
                  [&](const GemmBlock& part) { run_block(shape, epilogue, whole, part, a, b, c); });
  return true;
}

const char* implementation(const GemmShape& shape, const Epilogue& epilogue) {
  use_one_omp_thread();
  const Entry& entry = thread_cache().get(make_key(shape, epilogue));
  return entry.usable ? entry.impl.c_str() : "";
}

}  // namespace dtensor::kernels::cpu::onednn
