#include "tests/test_tensors.h"

#include <cstring>
#include <random>
#include <vector>

#include "dtensor/relayout.h"
#include "runtime/block.h"

namespace dtensor::testing {
namespace {

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

}  // namespace

Tensor uniform_f32(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Tensor integer_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(-50, 50);
  Tensor t = Tensor::empty(shape, dtype);
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* data = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        data[i] = dist(rng) > 0;
      } else {
        data[i] = from_double<T>(static_cast<double>(dist(rng)));
      }
    }
  });
  return t;
}

DTensor distribute_with_terms(const Tensor& global, const Layout& layout, uint64_t seed) {
  DTensor value = distribute(global, layout.without_partial());
  if (!layout.is_partial()) return value;
  const Mesh& mesh = layout.mesh();
  const ReduceOp op = layout.partial()[0].op;
  std::uniform_int_distribution<int64_t> dist(-20, 20);
  std::vector<Tensor> terms(value.shards().size());
  for (const auto& group : mesh.groups(layout.partial_mask())) {
    // Replicas (devices that differ only along replicated mesh dims) must hold the same terms,
    // as every op's output does: seed the noise by the group's coordinates on sharded dims.
    uint64_t group_seed = seed;
    for (int64_t m = 0; m < mesh.rank(); ++m) {
      if ((layout.sharded_mask() >> m) & 1u) {
        group_seed = group_seed * 1000003u + static_cast<uint64_t>(mesh.coord(group[0], m));
      }
    }
    std::mt19937_64 rng(group_seed);
    // Members of a partial group hold the same box; members owned by other processes draw their
    // noise too (and drop it) so every process sees the same terms.
    const Layout plain = layout.without_partial();
    Tensor box = slice_box(global, plain.shard_offset(global.shape(), group[0]),
                           plain.shard_shape(global.shape(), group[0]));
    // The first member balances the others so the reduction is exactly the value.
    Tensor first = box.clone();
    for (size_t i = 1; i < group.size(); ++i) {
      Tensor term = box.clone();
      visit_dtype(term.dtype(), [&](auto zero) {
        using T = decltype(zero);
        if constexpr (!std::is_same_v<T, bool>) {
          T* t = static_cast<T*>(term.raw_data());
          T* f = static_cast<T*>(first.raw_data());
          for (int64_t e = 0; e < term.num_elements(); ++e) {
            // Integer noise keeps integer-valued data exact in every dtype.
            const double noise = static_cast<double>(dist(rng));
            if (op == ReduceOp::kSum) {
              t[e] = from_double<T>(noise);
              f[e] = from_double<T>(to_double(f[e]) - noise);
            } else if (op == ReduceOp::kMax) {
              t[e] = from_double<T>(to_double(t[e]) - std::abs(noise));
            } else {
              t[e] = from_double<T>(to_double(t[e]) + std::abs(noise));
            }
          }
        }
      });
      if (mesh.is_local(group[i])) {
        terms[static_cast<size_t>(mesh.local_index(group[i]))] =
            term.with_device(value.shard(mesh.local_index(group[i])).device());
      }
    }
    if (mesh.is_local(group[0])) {
      terms[static_cast<size_t>(mesh.local_index(group[0]))] =
          first.with_device(value.shard(mesh.local_index(group[0])).device());
    }
  }
  return DTensor(global.shape(), global.dtype(), layout, std::move(terms));
}

bool same_bits(const DTensor& a, const DTensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.layout() != b.layout()) return false;
  for (size_t i = 0; i < a.shards().size(); ++i) {
    const Tensor& x = a.shards()[i];
    const Tensor& y = b.shards()[i];
    if (x.shape() != y.shape() || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

DTensor deep_copy(const DTensor& x) {
  std::vector<Tensor> shards;
  for (const Tensor& t : x.shards()) shards.push_back(t.clone());
  return DTensor::from_trusted_shards(x.shape(), x.dtype(), x.layout(), shards);
}

std::vector<double> global_values(const DTensor& x) {
  Tensor g = to_global(x);
  std::vector<double> out(static_cast<size_t>(g.num_elements()));
  for (int64_t i = 0; i < g.num_elements(); ++i) {
    out[static_cast<size_t>(i)] =
        g.dtype() == DType::kF32 ? g.data<float>()[i] : g.data<double>()[i];
  }
  return out;
}

bool adjacent_views(const DTensor& x) {
  std::vector<const Tensor*> parts;
  for (const Tensor& t : x.shards()) parts.push_back(&t);
  return !parts.empty() && Tensor::joined_view(parts, Device{}).has_value();
}

}  // namespace dtensor::testing
