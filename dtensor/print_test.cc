// Printing of Tensor, DTensor, Mesh and Layout (dtensor/print.h), and create_mesh from text.
#include "dtensor/print.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>

#include "dtensor/creation.h"
#include "dtensor/virtual_devices.h"

using namespace dtensor;

namespace {

// A tensor of `shape` holding 0, 1, 2, ... converted to T.
template <typename T>
Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  T* data = t.data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      data[i] = i % 2 == 1;
    } else {
      data[i] = static_cast<T>(static_cast<float>(i));
    }
  }
  return t;
}

template <typename T>
std::string streamed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

TEST_CASE("a tensor prints its dtype, shape and numpy-style values for every dtype") {
  // Continuation rows line up under the first row.
  auto expected = [](const std::string& head) {
    return head + "[[0, 1, 2],\n" + std::string(head.size() + 1, ' ') + "[3, 4, 5]])";
  };
  CHECK(streamed(iota<float>({2, 3})) == expected("Tensor(f32[2,3], "));
  CHECK(streamed(iota<double>({2, 3})) == expected("Tensor(f64[2,3], "));
  CHECK(streamed(iota<BFloat16>({2, 3})) == expected("Tensor(bf16[2,3], "));
  CHECK(streamed(iota<int32_t>({2, 3})) == expected("Tensor(i32[2,3], "));
  CHECK(streamed(iota<int64_t>({2, 3})) == expected("Tensor(i64[2,3], "));
  CHECK(streamed(iota<bool>({2, 3})) ==
        "Tensor(bool[2,3], [[false,  true, false],\n                   [ true, false,  true]])");
  // fmt gives the same text as operator<<.
  Tensor t = iota<float>({2, 3});
  CHECK(fmt::format("{}", t) == streamed(t));
}

TEST_CASE("floating-point values print in 6 significant digits with nan and inf spelled out") {
  Tensor t = Tensor::empty({5}, DType::kF32);
  float* d = t.data<float>();
  d[0] = 1.5f;
  d[1] = -0.125f;
  d[2] = std::numeric_limits<float>::quiet_NaN();
  d[3] = std::numeric_limits<float>::infinity();
  d[4] = 1.0f / 3.0f;
  CHECK(streamed(t) == "Tensor(f32[5], [     1.5,   -0.125,      nan,      inf, 0.333333])");
  Tensor big = Tensor::empty({2}, DType::kI64);
  big.data<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  big.data<int64_t>()[1] = 7;
  CHECK(streamed(big) == "Tensor(i64[2], [-9223372036854775808,                    7])");
}

TEST_CASE("empty and scalar tensors print without nesting") {
  CHECK(streamed(Tensor::zeros({0}, DType::kF32)) == "Tensor(f32[0], [])");
  CHECK(streamed(Tensor::zeros({2, 0}, DType::kI32)) == "Tensor(i32[2,0], [])");
  Tensor scalar = Tensor::empty({}, DType::kI32);
  scalar.data<int32_t>()[0] = 7;
  CHECK(streamed(scalar) == "Tensor(i32[], 7)");
}

TEST_CASE("a large tensor is summarised with ... keeping 3 entries at each end of every dim") {
  CHECK(streamed(iota<int32_t>({2000})) ==
        "Tensor(i32[2000], [   0,    1,    2, ..., 1997, 1998, 1999])");
  const std::string square = streamed(iota<int32_t>({40, 40}));
  CHECK(square ==
        "Tensor(i32[40,40], [[   0,    1,    2, ...,   37,   38,   39],\n"
        "                    [  40,   41,   42, ...,   77,   78,   79],\n"
        "                    [  80,   81,   82, ...,  117,  118,  119],\n"
        "                    ...,\n"
        "                    [1480, 1481, 1482, ..., 1517, 1518, 1519],\n"
        "                    [1520, 1521, 1522, ..., 1557, 1558, 1559],\n"
        "                    [1560, 1561, 1562, ..., 1597, 1598, 1599]])");
  // Under the threshold nothing is left out.
  CHECK(streamed(iota<int32_t>({1000})).find("...") == std::string::npos);
}

TEST_CASE("a rank-3 tensor separates its blocks with a blank line") {
  CHECK(streamed(iota<int32_t>({2, 2, 2})) ==
        "Tensor(i32[2,2,2], [[[0, 1],\n"
        "                     [2, 3]],\n"
        "\n"
        "                    [[4, 5],\n"
        "                     [6, 7]]])");
}

TEST_CASE("meshes and layouts print in short forms") {
  Mesh mesh = Mesh::create({{"batch", 2}, {"model", 4}}, DeviceType::kCPU);
  CHECK(streamed(mesh) == "Mesh(batch=2,model=4, CPU)");
  CHECK(fmt::format("{}", mesh) == "Mesh(batch=2,model=4, CPU)");
  CHECK(streamed(Mesh::create({{"x", 4}}, DeviceType::kCPU, 1, 2, "m")) ==
        "Mesh(name=m, x=4, CPU, process 1 of 2)");
  Layout layout({"unsharded", "model"}, mesh, {{"batch", ReduceOp::kSum}});
  CHECK(streamed(layout) ==
        "Layout([unsharded,model] partial:sum(batch), Mesh(batch=2,model=4, CPU))");
  CHECK(fmt::format("{}", layout) == streamed(layout));
}

TEST_CASE("a DTensor prints its layout and its gathered values, uneven and partial alike") {
  Mesh mesh = Mesh::create({{"batch", 2}, {"model", 4}}, DeviceType::kCPU);
  Tensor global = iota<float>({5, 3});
  // Uneven: 5 rows over 2 shards (3 + 2).
  DTensor uneven = distribute(global, Layout({"batch", "unsharded"}, mesh));
  const std::string values =
      "[[ 0,  1,  2],\n"
      "                [ 3,  4,  5],\n"
      "                [ 6,  7,  8],\n"
      "                [ 9, 10, 11],\n"
      "                [12, 13, 14]])";
  CHECK(streamed(uneven) ==
        "DTensor(f32[5,3], layout=[batch,unsharded], Mesh(batch=2,model=4, CPU),\n"
        "        values=" +
            values);
  // Partial over model: the printed value is the reduced sum, the same global tensor.
  DTensor partial =
      distribute(global, Layout({"batch", "unsharded"}, mesh, {{"model", ReduceOp::kSum}}));
  CHECK(streamed(partial) ==
        "DTensor(f32[5,3], layout=[batch,unsharded] partial:sum(model), Mesh(batch=2,model=4, "
        "CPU),\n        values=" +
            values);
  CHECK(fmt::format("{}", partial) == streamed(partial));
  // Empty DTensor.
  DTensor empty = zeros({0, 3}, Layout({"batch", "unsharded"}, mesh));
  CHECK(streamed(empty) ==
        "DTensor(f32[0,3], layout=[batch,unsharded], Mesh(batch=2,model=4, CPU),\n"
        "        values=[])");
}

TEST_CASE("create_mesh from text configures the virtual CPUs it needs") {
  Mesh mesh = create_mesh("batch=2,model=4");
  CHECK(num_virtual_cpus() == 8);
  CHECK(mesh.num_local_devices() == 8);
  CHECK(streamed(mesh) == "Mesh(batch=2,model=4, CPU)");
  CHECK(create_mesh("batch=3", "named").name() == "named");
  CHECK(num_virtual_cpus() == 3);
  CHECK_THROWS_AS(create_mesh("batch=two"), MeshError);
  configure_virtual_cpus(1);
}
