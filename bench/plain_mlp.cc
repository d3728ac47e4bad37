#include "bench/plain_mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "runtime/shape.h"
#include "runtime/thread_pool.h"

namespace dtensor::bench {
namespace {

// C[m,n] = op(A) op(B), row-major.
void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
}

void adam(float* __restrict w, const float* __restrict g, float* __restrict m,
          float* __restrict v, int64_t begin, int64_t end, float lr_t) {
  for (int64_t i = begin; i < end; ++i) {
    m[i] = 0.9f * m[i] + 0.1f * g[i];
    v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
    w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + 1e-7f);
  }
}

}  // namespace

PlainMlp::PlainMlp(std::vector<int> sizes, int batch) : sizes_(std::move(sizes)), batch_(batch) {
  const size_t layers = sizes_.size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    const size_t in = static_cast<size_t>(sizes_[l]), out = static_cast<size_t>(sizes_[l + 1]);
    Floats w(in * out);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * std::sin(static_cast<float>(i));
    w_.push_back(w);
    for (auto* v : {&dw_, &mw_, &vw_}) v->emplace_back(in * out, 0.0f);
    for (auto* v : {&b_, &db_, &mb_, &vb_}) v->emplace_back(out, 0.0f);
  }
  act_.resize(layers + 1);
  for (size_t l = 1; l <= layers; ++l) act_[l].resize(static_cast<size_t>(batch_ * sizes_[l]));
}

float PlainMlp::step(const float* images, const int32_t* labels) {
  // All cores for BLAS: the runtime's steps, taking turns with this one, may have set fewer.
  openblas_set_num_threads(openblas_get_num_procs());
  const int layers = static_cast<int>(sizes_.size()) - 1;
  auto input = [&](int l) { return l == 0 ? images : act_[static_cast<size_t>(l)].data(); };
  for (int l = 0; l < layers; ++l) {
    const int in = sizes_[l], out = sizes_[l + 1];
    float* y = act_[static_cast<size_t>(l + 1)].data();
    gemm(false, false, batch_, out, in, input(l), w_[l].data(), y);
    for (int r = 0; r < batch_; ++r) {
      for (int j = 0; j < out; ++j) {
        float z = y[r * out + j] + b_[l][j];
        y[r * out + j] = l + 1 < layers ? std::max(z, 0.0f) : z;
      }
    }
  }
  // Softmax cross-entropy; the logits become d(loss)/d(logits) in place.
  const int classes = sizes_.back();
  float* d = act_.back().data();
  double loss = 0;
  for (int r = 0; r < batch_; ++r) {
    float* row = d + r * classes;
    const float top = *std::max_element(row, row + classes);
    float sum = 0;
    for (int j = 0; j < classes; ++j) sum += row[j] = std::exp(row[j] - top);
    loss -= std::log(row[labels[r]] / sum);
    for (int j = 0; j < classes; ++j) row[j] = (row[j] / sum - (j == labels[r])) / batch_;
  }
  Floats& grad_in = grad_in_;
  for (int l = layers - 1; l >= 0; --l) {
    const int in = sizes_[l], out = sizes_[l + 1];
    gemm(true, false, in, out, batch_, input(l), d, dw_[l].data());
    std::fill(db_[l].begin(), db_[l].end(), 0.0f);
    for (int r = 0; r < batch_; ++r) {
      for (int j = 0; j < out; ++j) db_[l][j] += d[r * out + j];
    }
    if (l == 0) break;
    grad_in.resize(static_cast<size_t>(batch_ * in));
    gemm(false, true, batch_, in, out, d, w_[l].data(), grad_in.data());
    const float* a = input(l);
    for (int i = 0; i < batch_ * in; ++i) grad_in[i] = a[i] > 0 ? grad_in[i] : 0.0f;
    d = act_[static_cast<size_t>(l)].data();  // the activation is no longer needed
    std::copy(grad_in.begin(), grad_in.end(), d);
  }
  ++t_;
  const float lr_t = static_cast<float>(1e-3 * std::sqrt(1 - std::pow(0.999, t_)) /
                                        (1 - std::pow(0.9, t_)));
  // Adam over the two cores, as the runtime does.
  ThreadPool& pool = ThreadPool::global();
  for (int l = 0; l < layers; ++l) {
    const int64_t n = static_cast<int64_t>(w_[l].size());
    const int64_t parts = pool.num_threads();
    pool.parallel_for(parts, [&](int64_t p) {
      ShardRange r = chunk_range(n, parts, p);
      adam(w_[l].data(), dw_[l].data(), mw_[l].data(), vw_[l].data(), r.offset,
           r.offset + r.size, lr_t);
    });
    adam(b_[l].data(), db_[l].data(), mb_[l].data(), vb_[l].data(), 0,
         static_cast<int64_t>(b_[l].size()), lr_t);
  }
  return static_cast<float>(loss / batch_);
}

}  // namespace dtensor::bench
