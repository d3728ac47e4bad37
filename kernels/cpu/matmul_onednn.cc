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

#include "runtime/thread_pool.h"

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

// One product split into `blocks` blocks of rows (or of columns, when c is wider than tall), each
// run by one single-threaded primitive on the thread that picks it up.
struct BlockSplit {
  const GemmShape& shape;
  const Epilogue& epilogue;
  const Key& whole;
  const void* a;
  const void* b;
  float* c;
  int64_t blocks;

  void run(int64_t i) const {
    use_one_omp_thread();
    const bool by_rows = shape.m >= shape.n;
    const int64_t extent = by_rows ? shape.m : shape.n;
    const int64_t begin = extent * i / blocks, end = extent * (i + 1) / blocks;
    const size_t esize = shape.operands == DType::kBF16 ? 2 : 4;
    const size_t bias_size = epilogue.bias_dtype == DType::kBF16 ? 2 : 4;
    Key key = whole;
    key.accept_reference = true;
    const char* pa = static_cast<const char*>(a);
    const char* pb = static_cast<const char*>(b);
    const char* pbias = static_cast<const char*>(epilogue.bias);
    float* pc = c;
    if (by_rows) {
      key.m = end - begin;
      pa += static_cast<size_t>(begin * (shape.transpose_a ? 1 : shape.k)) * esize;
      pc += begin * shape.n;
    } else {
      key.n = end - begin;
      pb += static_cast<size_t>(begin * (shape.transpose_b ? shape.k : 1)) * esize;
      pc += begin;
      if (pbias != nullptr) pbias += static_cast<size_t>(begin) * bias_size;
    }
    Cache& mine = thread_cache();
    Entry& block = mine.get(key);
    if (!block.usable) std::abort();  // the whole product has a kernel, so its blocks do
    execute(block, mine.stream(), pa, pb, pbias, pc);
  }
};

// Below this many flops per block, waking the pool costs more than a second thread saves.
constexpr double kSplitFlops = 4e6;

}  // namespace

bool gemm(const GemmShape& shape, const Epilogue& epilogue, const void* a, const void* b, float* c,
          int threads) {
  use_one_omp_thread();
  Cache& cache = thread_cache();
  const Key whole = make_key(shape, epilogue);
  Entry& entry = cache.get(whole);
  if (!entry.usable) return false;
  const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) *
                       static_cast<double>(shape.k);
  ThreadPool& pool = ThreadPool::global();
  const int64_t blocks =
      std::min<int64_t>({threads, pool.num_threads(), static_cast<int64_t>(flops / kSplitFlops),
                         std::max(shape.m, shape.n)});
  if (blocks <= 1 || ThreadPool::in_worker()) {
    execute(entry, cache.stream(), a, b, epilogue.bias, c);
    return true;
  }
  // Blocks of rows of c (rows of a) or, when c is wider than tall, of columns (columns of b).
  const BlockSplit split{shape, epilogue, whole, a, b, c, blocks};
  // One captured reference: std::function keeps it inline, so the call allocates nothing.
  pool.parallel_for(blocks, [&split](int64_t i) { split.run(i); });
  return true;
}

const char* implementation(const GemmShape& shape, const Epilogue& epilogue) {
  use_one_omp_thread();
  const Entry& entry = thread_cache().get(make_key(shape, epilogue));
  return entry.usable ? entry.impl.c_str() : "";
}

}  // namespace dtensor::kernels::cpu::onednn
