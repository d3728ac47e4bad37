#include "dtensor/dtensor.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "dtensor/variable.h"
#include "dtensor/virtual_devices.h"
#include "kernels/kernels.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::integer_tensor;
using dtensor::testing::standard_meshes;

namespace {

Mesh line8() { return Mesh::create({{"batch", 8}}, DeviceType::kCPU); }

std::vector<Tensor> components_of(const Tensor& x, const Layout& layout) {
  return unpack(distribute(x, layout));
}

}  // namespace

TEST_CASE("pack infers the global shape, uneven shards included") {
  for (const Mesh& mesh : standard_meshes()) {
    for (const Layout& layout : all_layouts(mesh, 2, /*with_partial=*/false)) {
      Tensor x = integer_tensor({11, 6}, DType::kF32, 3);
      std::vector<Tensor> parts;
      for (const Tensor& c : components_of(x, layout)) parts.push_back(c.clone());
      DTensor packed = pack(parts, layout);
      INFO(layout.short_string());
      CHECK(packed.shape() == Shape{11, 6});
      CHECK(bitwise_equal(to_global(packed), x));
      std::vector<Tensor> back = unpack(packed);
      REQUIRE(back.size() == parts.size());
      for (size_t i = 0; i < back.size(); ++i) CHECK(back[i].shares_storage_with(parts[i]));
    }
  }
}

TEST_CASE("pack validates its components") {
  Mesh mesh = line8();
  Layout rows = Layout::batch_sharded(mesh, "batch", 2, 0);
  std::vector<Tensor> good;
  for (int i = 0; i < 8; ++i) good.push_back(Tensor::zeros({2, 3}, DType::kF32));

  SECTION("count") {
    std::vector<Tensor> seven(good.begin(), good.begin() + 7);
    CHECK_THROWS_MATCHES(pack(seven, rows), InvalidArgumentError,
                         Message("[pack] got 7 components for the 8 local devices of mesh "
                                 "batch=8 (layout [batch,unsharded])"));
  }
  SECTION("shape") {
    std::vector<Tensor> bad = good;
    bad[3] = Tensor::zeros({2, 4}, DType::kF32);
    CHECK_THROWS_MATCHES(pack(bad, rows, {16, 3}), ShapeError,
                         Message("[DTensor] component 3 has shape [2,4], but device 3 holds "
                                 "[2,3] of global shape [16,3] under [batch,unsharded]"));
  }
  SECTION("rank") {
    std::vector<Tensor> bad(8, Tensor::zeros({6}, DType::kF32));
    CHECK_THROWS_MATCHES(pack(bad, rows), ShapeError,
                         Message("[pack] component shape [6] has rank 1, layout "
                                 "[batch,unsharded] has rank 2"));
  }
  SECTION("dtype") {
    std::vector<Tensor> bad = good;
    bad[5] = Tensor::zeros({2, 3}, DType::kF64);
    CHECK_THROWS_MATCHES(pack(bad, rows), DTypeError,
                         Message("[DTensor] component 5 is f64[2,3]@CPU:0, expected f32"));
  }
  SECTION("device type") {
    std::vector<Tensor> bad = good;
    // A GPU tag on a host buffer: this build cannot allocate GPU memory (runtime/allocator.h).
    bad[1] = Tensor::zeros({2, 3}, DType::kF32).with_device(Device{DeviceType::kGPU, 1});
    CHECK_THROWS_MATCHES(pack(bad, rows), InvalidArgumentError,
                         Message("[DTensor] component 1 is on GPU:1, the mesh has CPU devices"));
  }
  SECTION("components take their device") {
    DTensor t = pack(good, rows);
    for (int64_t i = 0; i < 8; ++i) CHECK(t.shard(i).device() == Device{DeviceType::kCPU, i});
  }
}

TEST_CASE("distribute and to_global are inverse for every layout") {
  for (const Mesh& mesh : standard_meshes()) {
    for (int64_t rank = 0; rank <= 3; ++rank) {
      Shape shape = Shape{7, 3, 5};
      shape.resize(static_cast<size_t>(rank));
      Tensor x = integer_tensor(shape, DType::kF32, 9);
      for (const Layout& layout : all_layouts(mesh, rank, /*with_partial=*/true)) {
        INFO(layout.short_string());
        DTensor d = distribute(x, layout);
        CHECK(bitwise_equal(to_global(d), x));
      }
    }
  }
}

TEST_CASE("distribute rejects a shape that does not fit the layout") {
  Layout rows = Layout::batch_sharded(line8(), "batch", 2, 0);
  CHECK_THROWS_MATCHES(distribute(Tensor::zeros({4}, DType::kF32), rows), LayoutError,
                       Message("[distribute] shape [4] has rank 1 but layout [batch,unsharded] "
                               "has rank 2"));
}

TEST_CASE("random values do not depend on the mesh or the layout") {
  const Shape shape = {13, 6, 5};
  Mesh one = Mesh::create({{"d", 1}}, DeviceType::kCPU);
  for (auto make : {+[](const Shape&s, const Layout&l) { return random_uniform(s, l, 22, -1, 1); },
                    +[](const Shape&s, const Layout&l) { return random_normal(s, l, 22); },
                    +[](const Shape&s, const Layout&l) { return truncated_normal(s, l, 22); }}) {
    Tensor reference = to_global(make(shape, Layout::replicated(one, 3)));
    for (const Mesh& mesh : standard_meshes()) {
      for (const Layout& layout : all_layouts(mesh, 3, /*with_partial=*/true)) {
        INFO(layout.short_string());
        DTensor r = make(shape, layout);
        REQUIRE(r.layout() == layout);
        REQUIRE(bitwise_equal(to_global(r), reference));
      }
    }
  }
  Layout rep = Layout::replicated(line8(), 1);
  CHECK_FALSE(bitwise_equal(to_global(random_uniform({64}, rep, 1)),
                            to_global(random_uniform({64}, rep, 2))));
}

TEST_CASE("creation shares buffers between devices holding the same box") {
  Mesh grid = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  DTensor w = random_uniform({784, 700}, Layout::replicated(grid, 2), 22);
  for (const Tensor& s : w.shards()) CHECK(s.shares_storage_with(w.shard(0)));
  DTensor b = zeros({700}, Layout::batch_sharded(grid, "y", 1));
  CHECK(b.shard(0).shares_storage_with(b.shard(4)));  // same y coordinate
  CHECK_FALSE(b.shard(0).shares_storage_with(b.shard(1)));
  DTensor f = fill({3}, Layout::replicated(grid, 1), 2.5, DType::kF64);
  CHECK(to_global(f).data<double>()[2] == 2.5);
  DTensor o = ones({2, 2}, Layout::replicated(grid, 2), DType::kI32);
  CHECK(to_global(o).data<int32_t>()[3] == 1);
}

TEST_CASE("creation errors name the function") {
  Layout rows = Layout::batch_sharded(line8(), "batch", 2, 0);
  CHECK_THROWS_MATCHES(random_uniform({4}, rows, 1), LayoutError,
                       Message("[random_uniform] shape [4] has rank 1 but layout "
                               "[batch,unsharded] has rank 2"));
  CHECK_THROWS_MATCHES(zeros({-1, 2}, rows), ShapeError,
                       Message("[fill] negative dim in shape [-1,2]"));
}

TEST_CASE("DVariable assigns through relayout and keeps its identity") {
  Mesh mesh = line8();
  Layout rep = Layout::replicated(mesh, 2);
  Tensor x = integer_tensor({16, 4}, DType::kF32, 1);
  Tensor y = integer_tensor({16, 4}, DType::kF32, 2);
  DVariable v(distribute(x, rep), "w");
  DVariable alias = v;
  CHECK(alias.id() == v.id());
  CHECK(DVariable(distribute(x, rep)).id() != v.id());

  DTensor before = v.value();
  // A partial value (like a data-parallel gradient) is reduced on the way in.
  v.assign(
      dtensor::testing::distribute_with_terms(y, rep.with_partial({{"batch", ReduceOp::kSum}}), 3));
  CHECK(v.layout() == rep);
  CHECK(bitwise_equal(to_global(alias.value()), y));
  CHECK(bitwise_equal(to_global(before), x));  // copy-on-write: earlier reads keep their value

  v.assign_add(distribute(x, Layout::batch_sharded(mesh, "batch", 2)));
  v.assign_sub(distribute(y, rep));
  DTensor now = v.value();
  CHECK(bitwise_equal(to_global(now), x));
  for (const Tensor& s : now.shards()) CHECK(s.shares_storage_with(now.shard(0)));
}

TEST_CASE("DVariable::update_in_place writes only buffers no one else holds, atomically") {
  Mesh mesh = line8();
  for (const Layout& layout :
       {Layout::replicated(mesh, 2), Layout::batch_sharded(mesh, "batch", 2)}) {
    INFO(layout.to_string());
    // A replicated value's shards share one buffer: still the variable's own.
    DVariable v(distribute(integer_tensor({16, 4}, DType::kF32, 1), layout), "w");
    auto fill_with = [](float value) {
      return [value](const std::vector<Tensor>& shards) {
        for (const Tensor& t : shards) {
          Tensor w = t;
          for (int64_t i = 0; i < w.num_elements(); ++i) w.data<float>()[i] = value;
        }
        return true;
      };
    };
    CHECK(v.update_in_place(fill_with(1.0f)));
    std::optional<DTensor> held = v.value();  // a read still alive: copy-on-write must hold
    const void* buffer = held->shard(0).raw_data();
    CHECK_FALSE(v.update_in_place(fill_with(2.0f)));
    CHECK(to_global(*held).data<float>()[0] == 1.0f);
    // What update returns is passed on.
    DVariable other(distribute(integer_tensor({16, 4}, DType::kF32, 2), layout));
    CHECK_FALSE(other.update_in_place([](const std::vector<Tensor>&) { return false; }));
    // Once the read is gone, the same buffers are written.
    held.reset();
    CHECK(v.update_in_place(fill_with(3.0f)));
    CHECK(v.value().shard(0).raw_data() == buffer);
    CHECK(to_global(v.value()).data<float>()[63] == 3.0f);
  }
  // A reader on another thread sees whole updates only, and what it holds never changes.
  DVariable v(
      distribute(Tensor::zeros({64, 64}, DType::kF32), Layout::batch_sharded(mesh, "batch", 2)));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done.load()) {
      {
        const Tensor t = to_global(v.value());
        const float first = t.data<float>()[0];
        for (int64_t i = 0; i < t.num_elements(); ++i) torn += t.data<float>()[i] != first ? 1 : 0;
      }
      // A gap with nothing held, so that some updates can write in place.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  // At least 2000 updates; more (for up to 20 s) until one of them found the buffers free, which
  // on a loaded host can take longer than the first 2000.
  int in_place = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int k = 1; k <= 2000 || (in_place == 0 && std::chrono::steady_clock::now() < deadline);
       ++k) {
    in_place += v.update_in_place([k](const std::vector<Tensor>& shards) {
      for (const Tensor& t : shards) {
        Tensor w = t;
        for (int64_t i = 0; i < w.num_elements(); ++i) w.data<float>()[i] = static_cast<float>(k);
      }
      return true;
    })
                    ? 1
                    : 0;
  }
  done = true;
  reader.join();
  CHECK(torn.load() == 0);
  CHECK(in_place > 0);
}

TEST_CASE("DVariable rejects values that do not fit") {
  Mesh mesh = line8();
  Layout rep = Layout::replicated(mesh, 2);
  DVariable v(zeros({4, 4}, rep), "w");
  CHECK_THROWS_MATCHES(v.assign(zeros({4, 5}, rep)), ShapeError,
                       Message("[DVariable::assign] variable 'w' is f32[4,4], the value is "
                               "f32[4,5] [unsharded,unsharded]"));
  CHECK_THROWS_MATCHES(v.assign_add(zeros({4, 4}, rep, DType::kF64)), ShapeError,
                       Message("[DVariable::assign_add] variable 'w' is f32[4,4], the value is "
                               "f64[4,4] [unsharded,unsharded]"));
  Mesh other = Mesh::create({{"model", 8}}, DeviceType::kCPU);
  CHECK_THROWS_MATCHES(v.assign(zeros({4, 4}, Layout::replicated(other, 2))), LayoutError,
                       Message("[DVariable::assign] variable 'w' lives on mesh batch=8, the "
                               "value on mesh model=8"));
  CHECK_THROWS_MATCHES(
      DVariable(zeros({4}, Layout::replicated(mesh, 1).with_partial({{"batch", ReduceOp::kSum}})),
                "g"),
      LayoutError,
      Message("[DVariable] variable 'g' cannot have partial layout [unsharded] "
              "partial:sum(batch)"));
}

TEST_CASE("virtual CPUs size the meshes this process can create") {
  configure_virtual_cpus(8);
  CHECK(create_mesh({{"batch", 8}}).num_devices() == 8);
  CHECK(create_mesh({{"batch", 8}}).num_local_devices() == 8);
  CHECK_THROWS_MATCHES(create_mesh({{"x", 2}, {"y", 2}}), MeshError,
                       Message("[create_mesh] mesh x=2,y=2 has 4 devices but this process has 8 "
                               "virtual CPUs; call configure_virtual_cpus(4) first"));
  CHECK_THROWS_MATCHES(configure_virtual_cpus(0), InvalidArgumentError,
                       Message("[configure_virtual_cpus] need n >= 1, got 0"));
}

TEST_CASE("a GPU mesh with no GPU backend registered fails at creation") {
  configure_virtual_cpus(8);
  CHECK_THROWS_MATCHES(create_mesh({{"batch", 2}, {"model", 4}}, DeviceType::kGPU),
                       UnimplementedError,
                       Message("[create_mesh] mesh |batch=2,model=4| has GPU devices, but no GPU "
                               "backend is registered (build with --config=cuda, or set "
                               "DTENSOR_EMULATED_GPUS=N for the emulated test device)"));
  CHECK_THROWS_MATCHES(create_mesh("batch=2", DeviceType::kGPU), UnimplementedError,
                       Message("[create_mesh] mesh |batch=2| has GPU devices, but no GPU backend "
                               "is registered (build with --config=cuda, or set "
                               "DTENSOR_EMULATED_GPUS=N for the emulated test device)"));
  // The check comes first: the virtual CPU count (still 8 here) does not matter.
  CHECK(num_virtual_cpus() == 8);
  CHECK(create_mesh({{"batch", 8}}, DeviceType::kCPU).device_type() == DeviceType::kCPU);
  CHECK(create_mesh("batch=4", DeviceType::kCPU, "named").name() == "named");
  // A GPU mesh can still be described (Mesh::create), but no tensor can be made on it.
  Mesh gpus = Mesh::create({{"batch", 2}}, DeviceType::kGPU);
  CHECK_THROWS_MATCHES(zeros({4}, Layout::replicated(gpus, 1)), UnimplementedError,
                       Message("[Tensor::empty] cannot allocate 16 bytes on GPU:0: no GPU backend "
                               "is registered (build with --config=cuda, or set "
                               "DTENSOR_EMULATED_GPUS=N for the emulated test device)"));
}

TEST_CASE("pack rejects components whose buffer is not where their device is") {
  Mesh gpus = Mesh::create({{"batch", 2}}, DeviceType::kGPU);
  Layout rows = Layout::batch_sharded(gpus, "batch", 2, 0);
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < 2; ++i) {
    parts.push_back(Tensor::zeros({1, 3}, DType::kF32).with_device({DeviceType::kGPU, i}));
  }
  CHECK_THROWS_MATCHES(pack(parts, rows), InvalidArgumentError,
                       Message("[DTensor] component 0 is tagged GPU:0 but lives in host memory"));
}

TEST_CASE("replicated shards share one buffer on CPU devices") {
  Mesh mesh = line8();
  for (const DTensor& t :
       {zeros({3}, Layout::replicated(mesh, 1)),
        random_uniform({3}, Layout::replicated(mesh, 1), 7),
        distribute(Tensor::zeros({3}, DType::kF32), Layout::replicated(mesh, 1))}) {
    for (int64_t i = 1; i < 8; ++i) {
      CHECK(t.shard(i).shares_storage_with(t.shard(0)));
      CHECK(same_memory_space(t.shard(i).device(), t.shard(0).device()));
    }
  }
}

TEST_CASE("regression: creating a tensor whose element count overflows is a ShapeError") {
  const int64_t big = int64_t{1} << 40;
  // Used to give 0-byte shards for a [2^40,2^40] tensor.
  Layout rows = Layout::batch_sharded(line8(), "batch", 2, 0);
  CHECK_THROWS_MATCHES(zeros({big, big}, rows), ShapeError,
                       Message("[fill] shape [1099511627776,1099511627776] has too many elements "
                               "(at most 1125899906842624 are supported)"));
  CHECK_THROWS_MATCHES(random_uniform({big, big}, rows, 1), ShapeError,
                       Message("[random_uniform] shape [1099511627776,1099511627776] has too "
                               "many elements (at most 1125899906842624 are supported)"));
}

TEST_CASE("regression: random_uniform of a huge shape is a dtensor error, not std::bad_alloc") {
  Layout rep = Layout::replicated(line8(), 1);
  // 4 TiB per shard: above the per-buffer limit.
  CHECK_THROWS_MATCHES(random_uniform({int64_t{1} << 40}, rep, 1), InvalidArgumentError,
                       Message("[Tensor::empty] a buffer of shape [1099511627776] with 4-byte "
                               "elements needs 4398046511104 bytes; at most 1099511627776 are "
                               "supported"));
  // Sharded 8 ways: 512 GiB per shard, within the limit but beyond any test machine's memory.
  Layout rows = Layout::batch_sharded(line8(), "batch", 1, 0);
  CHECK_THROWS_MATCHES(random_normal({int64_t{1} << 40}, rows, 1), InvalidArgumentError,
                       Message("[Tensor::empty] cannot allocate 549755813888 bytes for "
                               "f32[137438953472]"));
}

TEST_CASE("regression: fill checks that the value fits the dtype") {
  Layout rep = Layout::replicated(line8(), 1);
  // static_cast<int32_t>(1e300) is undefined behaviour.
  CHECK_THROWS_MATCHES(fill({2}, rep, 1e300, DType::kI32), InvalidArgumentError,
                       Message("[fill] value 1e+300 does not fit dtype i32"));
  CHECK_THROWS_MATCHES(fill({2}, rep, 2147483648.0, DType::kI32), InvalidArgumentError,
                       Message("[fill] value 2147483648 does not fit dtype i32"));
  CHECK_THROWS_MATCHES(fill({2}, rep, 2.5, DType::kI64), InvalidArgumentError,
                       Message("[fill] value 2.5 does not fit dtype i64"));
  CHECK_THROWS_MATCHES(fill({2}, rep, std::nan(""), DType::kI64), InvalidArgumentError,
                       Message("[fill] value nan does not fit dtype i64"));
  CHECK_THROWS_MATCHES(fill({2}, rep, 2.0, DType::kBool), InvalidArgumentError,
                       Message("[fill] value 2 does not fit dtype bool"));
  CHECK_THROWS_MATCHES(fill({2}, rep, 1e39, DType::kF32), InvalidArgumentError,
                       Message("[fill] value 1e+39 does not fit dtype f32"));
  CHECK_THROWS_MATCHES(fill({2}, rep, -1e300, DType::kBF16), InvalidArgumentError,
                       Message("[fill] value -1e+300 does not fit dtype bf16"));
  CHECK(to_global(fill({1}, rep, -2147483648.0, DType::kI32)).data<int32_t>()[0] == INT32_MIN);
  CHECK(to_global(fill({1}, rep, 2147483647.0, DType::kI32)).data<int32_t>()[0] == INT32_MAX);
  CHECK(std::isinf(to_global(fill({1}, rep, INFINITY, DType::kF32)).data<float>()[0]));
  CHECK(to_global(fill({1}, rep, 1e300, DType::kF64)).data<double>()[0] == 1e300);
}

TEST_CASE("DVariable::copy_of keeps one copy per value until the value changes") {
  Mesh mesh = line8();
  DVariable v(distribute(integer_tensor({16, 4}, DType::kF32, 1), Layout::replicated(mesh, 2)));
  auto copy_values = [](const DTensor& copy) {
    return kernels::cast(to_global(copy), DType::kF32);
  };
  auto equal = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  };
  // Not a variable's value: no copy.
  CHECK_FALSE(DVariable::copy_of(
                  distribute(integer_tensor({16, 4}, DType::kF32, 1), Layout::replicated(mesh, 2)),
                  DType::kBF16)
                  .has_value());
  std::optional<DTensor> c1 = DVariable::copy_of(v.value(), DType::kBF16);
  REQUIRE(c1.has_value());
  CHECK(c1->dtype() == DType::kBF16);
  CHECK(c1->layout() == v.layout());
  // Replicas share one copy buffer, as they share the value's; a second read gets the same copy.
  CHECK(c1->shard(0).shares_storage_with(c1->shard(7)));
  CHECK(DVariable::copy_of(v.value(), DType::kBF16)->shard(0).is_same_as(c1->shard(0)));
  CHECK(equal(copy_values(*c1), to_global(v.value())));  // small integers: exact in bf16
  // A value read before an assign is no longer the variable's: no copy for it.
  const DTensor old = v.value();
  v.assign(distribute(integer_tensor({16, 4}, DType::kF32, 2), Layout::replicated(mesh, 2)));
  CHECK_FALSE(DVariable::copy_of(old, DType::kBF16).has_value());
  std::optional<DTensor> c2 = DVariable::copy_of(v.value(), DType::kBF16);
  REQUIRE(c2.has_value());
  CHECK_FALSE(c2->shard(0).shares_storage_with(c1->shard(0)));
  CHECK(equal(copy_values(*c2), to_global(v.value())));
  c1.reset();
  // An in-place update that does not write the copy drops it; one that does keeps it, even while
  // the copy's reader is gone and only the variable holds it.
  auto fill = [](const std::vector<Tensor>& shards, float value) {
    for (const Tensor& t : shards) {
      Tensor w = t;
      for (int64_t i = 0; i < w.num_elements(); ++i) {
        if (w.dtype() == DType::kF32) w.data<float>()[i] = value;
        if (w.dtype() == DType::kBF16) w.data<BFloat16>()[i] = BFloat16(value);
      }
    }
  };
  const void* copy_buffer = c2->shard(0).raw_data();
  CHECK_FALSE(
      v.update_in_place_with_copy([&](const std::vector<Tensor>&, const std::vector<Tensor>& copy) {
        return !copy.empty();  // c2 still holds the copy: not handed over
      }));
  c2.reset();
  std::optional<DTensor> c3 = DVariable::copy_of(v.value(), DType::kBF16);
  copy_buffer = c3->shard(0).raw_data();
  c3.reset();
  CHECK(v.update_in_place_with_copy(
      [&](const std::vector<Tensor>& shards, const std::vector<Tensor>& copy) {
        if (copy.size() != shards.size()) return false;
        fill(shards, 5.0f);
        fill(copy, 5.0f);
        return true;
      }));
  std::optional<DTensor> c4 = DVariable::copy_of(v.value(), DType::kBF16);
  CHECK(c4->shard(0).raw_data() == copy_buffer);
  CHECK(copy_values(*c4).data<float>()[0] == 5.0f);
  c4.reset();
  CHECK(v.update_in_place([&](const std::vector<Tensor>& shards) {
    fill(shards, 6.0f);
    return true;
  }));
  std::optional<DTensor> c5 = DVariable::copy_of(v.value(), DType::kBF16);
  CHECK(copy_values(*c5).data<float>()[0] == 6.0f);
}
