#include "mesh/mesh.h"

#include <catch2/catch.hpp>

#include <set>

#include "runtime/error.h"

using namespace dtensor;

namespace {

std::vector<std::vector<MeshDim>> test_meshes() {
  return {{{"batch", 8}}, {{"x", 2}, {"y", 4}}, {{"a", 2}, {"b", 2}, {"c", 2}}};
}

}  // namespace

TEST_CASE("ids are row-major over the dims") {
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  CHECK(mesh.num_devices() == 8);
  CHECK(mesh.coords(5) == std::vector<int64_t>{1, 1});
  CHECK(mesh.coords(3) == std::vector<int64_t>{0, 3});
  for (int64_t id = 0; id < 8; ++id) CHECK(mesh.device_id(mesh.coords(id)) == id);
  CHECK(mesh.dim_size("y") == 4);
  CHECK(mesh.dim_index("y") == 1);
  CHECK(mesh.dim_index("z") == -1);
}

TEST_CASE("a process owns a contiguous block") {
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU, 1, 4);
  CHECK(mesh.local_device_ids() == std::vector<int64_t>{2, 3});
  CHECK(mesh.num_processes() == 4);
  CHECK(mesh.process_index() == 1);
  CHECK(mesh.is_local(3));
  CHECK_FALSE(mesh.is_local(4));
  CHECK(mesh.local_index(3) == 1);
  CHECK(mesh.owner_process(7) == 3);
  CHECK_THROWS_MATCHES(
      mesh.local_index(0), MeshError,
      Catch::Message("[Mesh::local_index] device 0 is not local to process 1 of "
                     "mesh |x=2,y=4|0,1,2,3,4,5,6,7|2,3|/job:worker/replica:0/"
                     "task:1/device:CPU:0,/job:worker/replica:0/task:1/device:CPU:1"));
}

TEST_CASE("groups partition the devices along any subset of dims") {
  for (const auto& dims : test_meshes()) {
    Mesh mesh = Mesh::create(dims, DeviceType::kCPU);
    for (MeshDimMask mask = 0; mask < (1u << mesh.rank()); ++mask) {
      auto groups = mesh.groups(mask);
      int64_t size = mesh.group_size(mask);
      CHECK(static_cast<int64_t>(groups.size()) * size == mesh.num_devices());
      std::set<int64_t> seen;
      for (const auto& g : groups) {
        REQUIRE(static_cast<int64_t>(g.size()) == size);
        for (size_t i = 0; i < g.size(); ++i) {
          CHECK(seen.insert(g[i]).second);
          CHECK(mesh.index_in_group(g[i], mask) == static_cast<int64_t>(i));
          CHECK(mesh.group(g[i], mask) == g);
          // Members differ only along the dims in the mask.
          for (int64_t d = 0; d < mesh.rank(); ++d) {
            if (!(mask & (1u << d))) CHECK(mesh.coord(g[i], d) == mesh.coord(g[0], d));
          }
        }
      }
      CHECK(static_cast<int64_t>(seen.size()) == mesh.num_devices());
    }
  }
}

TEST_CASE("group order is row-major over the chosen dims") {
  Mesh mesh = Mesh::create({{"a", 2}, {"b", 2}, {"c", 2}}, DeviceType::kCPU);
  CHECK(mesh.group(0, mesh.mask({"a", "c"})) == std::vector<int64_t>{0, 1, 4, 5});
  CHECK(mesh.group(2, mesh.mask({"a"})) == std::vector<int64_t>{2, 6});
  CHECK(mesh.group(7, 0) == std::vector<int64_t>{7});
  CHECK_THROWS_MATCHES(mesh.mask({"d"}), MeshError,
                       Catch::Message("[Mesh::mask] no dim 'd' in mesh a=2,b=2,c=2"));
}

TEST_CASE("text form round-trips") {
  for (const auto& dims : test_meshes()) {
    for (int64_t procs : {1, 2}) {
      for (int64_t p = 0; p < procs; ++p) {
        Mesh mesh = Mesh::create(dims, DeviceType::kCPU, p, procs, p == 0 ? "" : "m");
        Mesh back = Mesh::from_string(mesh.to_string());
        CHECK(back == mesh);
        CHECK(back.to_string() == mesh.to_string());
        CHECK(back.fingerprint() == mesh.fingerprint());
      }
    }
  }
}

TEST_CASE("parses TF DTensor mesh strings") {
  std::string text =
      "|batch=2,model=2|0,1,2,3|0,1,2,3|/job:localhost/replica:0/task:0/device:CPU:0,"
      "/job:localhost/replica:0/task:0/device:CPU:1,/job:localhost/replica:0/task:0/device:CPU:2,"
      "/job:localhost/replica:0/task:0/device:CPU:3";
  Mesh mesh = Mesh::from_string(text);
  CHECK(mesh.to_string() == text);
  CHECK(mesh.device_type() == DeviceType::kCPU);
  CHECK(mesh.dims_string() == "batch=2,model=2");
  CHECK(mesh == Mesh::create({{"batch", 2}, {"model", 2}}, DeviceType::kCPU));
  std::string gpu =
      "mesh|x=2|0,1|1|/job:worker/replica:0/task:1/device:GPU:0|/job:worker/a,/job:worker/b";
  Mesh g = Mesh::from_string(gpu);
  CHECK(g.device_type() == DeviceType::kGPU);
  CHECK(g.process_index() == 1);
  CHECK(g.to_string() == gpu);
}

TEST_CASE("fingerprints agree for equal meshes and differ otherwise") {
  Mesh a = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU, 0, 2);
  Mesh b = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU, 1, 2);
  CHECK(a.fingerprint() == b.fingerprint());  // same global mesh, other process
  CHECK(a != b);                              // different local part
  std::set<uint64_t> prints;
  prints.insert(a.fingerprint());
  prints.insert(Mesh::create({{"x", 4}, {"y", 2}}, DeviceType::kCPU).fingerprint());
  prints.insert(Mesh::create({{"y", 2}, {"x", 4}}, DeviceType::kCPU).fingerprint());
  prints.insert(Mesh::create({{"x", 2}, {"z", 4}}, DeviceType::kCPU).fingerprint());
  prints.insert(Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kGPU).fingerprint());
  prints.insert(Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU, 0, 1, "other").fingerprint());
  prints.insert(Mesh::create({{"x", 8}}, DeviceType::kCPU).fingerprint());
  CHECK(prints.size() == 7);
}

TEST_CASE("validation: every rule has its error") {
  using Catch::Message;
  CHECK_THROWS_MATCHES(Mesh::create({{"x", 2}, {"x", 2}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh dim name 'x' appears twice"));
  CHECK_THROWS_MATCHES(Mesh::create({{"unsharded", 2}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh dim name 'unsharded' is reserved"));
  CHECK_THROWS_MATCHES(Mesh::create({{"any", 2}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh dim name 'any' is reserved"));
  CHECK_THROWS_MATCHES(Mesh::create({{"match", 2}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh dim name 'match' is reserved"));
  CHECK_THROWS_MATCHES(Mesh::create({{"", 2}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh dim name is empty"));
  CHECK_THROWS_MATCHES(
      Mesh::create({{"a|b", 2}}, DeviceType::kCPU), MeshError,
      Message(
          "[Mesh::create] mesh dim name 'a|b' has character '|' (allowed: letters, digits, _-.)"));
  CHECK_THROWS_MATCHES(Mesh::create({{"x", 0}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh dim 'x' has size 0; sizes must be >= 1"));
  CHECK_THROWS_MATCHES(
      Mesh::create({{"x", 6}}, DeviceType::kCPU, 0, 4), MeshError,
      Message("[Mesh::create] process 0 of 4 cannot own an equal block of a mesh of 6 devices"));
  CHECK_THROWS_MATCHES(
      Mesh::create({{"x", 4}}, DeviceType::kCPU, 2, 2), MeshError,
      Message("[Mesh::create] process 2 of 2 cannot own an equal block of a mesh of 4 devices"));
}

TEST_CASE("validation of mesh strings") {
  using Catch::Message;
  const std::string dev = "/job:localhost/replica:0/task:0/device:CPU:";
  CHECK_THROWS_MATCHES(Mesh::from_string("|x=2|0,1"), MeshError,
                       Message("[Mesh::from_string] mesh string '|x=2|0,1' has 3 '|'-separated "
                               "parts; expected name|dims|global ids|local ids|local "
                               "devices[|global devices]"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|x2|0,1|0,1|" + dev + "0," + dev + "1"), MeshError,
                       Message("[parse_mesh_dims] bad mesh dim 'x2' in 'x2' (expected name=size)"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|x=2|0,1,2|0,1|" + dev + "0," + dev + "1"), MeshError,
                       Message("[Mesh::from_string] global ids in '|x=2|0,1,2|0,1|" + dev + "0," +
                               dev + "1' must be 0..1 in order (3 ids given)"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|x=2|0,1|0,1|" + dev + "0"), MeshError,
                       Message("[Mesh::from_string] mesh '|x=2|0,1|0,1|" + dev +
                               "0' has 2 local ids but 1 local devices"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|x=4|0,1,2,3|1,2|" + dev + "0," + dev + "1"), MeshError,
                       Message("[Mesh::from_string] local device ids [1,2] are not a contiguous "
                               "block [k*2, (k+1)*2) of 0..3"));
  CHECK_THROWS_MATCHES(
      Mesh::from_string("|x=2|0,a|0,1|" + dev + "0," + dev + "1"), MeshError,
      Message("[Mesh::from_string] bad global id 'a' in mesh string '|x=2|0,a|0,1|" + dev + "0," +
              dev + "1'"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|x=1|0|0|/job:a/device:TPU:0"), MeshError,
                       Message("[Mesh::from_string] bad device name '/job:a/device:TPU:0' in mesh "
                               "string '|x=1|0|0|/job:a/device:TPU:0'"));
  CHECK_THROWS_MATCHES(
      Mesh::from_string("|x=3|0,1,2|0,1|" + dev + "0," + dev + "1"), MeshError,
      Message("[Mesh::from_string] 2 local device ids for a mesh of 3 devices; a "
              "process owns a non-empty block whose size divides the device count"));
}

TEST_CASE("regression: mesh strings whose device count overflows are rejected") {
  using Catch::Message;
  // Used to wrap around to a small device count and then write out of bounds.
  CHECK_THROWS_MATCHES(Mesh::from_string("|=333,=33333333333333333|||"), MeshError,
                       Message("[Mesh::from_string] mesh dim name is empty"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|a=333,b=33333333333333333|||"), MeshError,
                       Message("[Mesh::from_string] mesh a=333,b=33333333333333333 has more than "
                               "1048576 devices"));
  CHECK_THROWS_MATCHES(
      Mesh::from_string("|a=4294967296,b=4294967296|0|0|/job:localhost/replica:0/task:0/"
                        "device:CPU:0"),
      MeshError,
      Message("[Mesh::from_string] mesh a=4294967296,b=4294967296 has more than 1048576 "
              "devices"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|a=2,=2|0,1,2,3|0|x"), MeshError,
                       Message("[Mesh::from_string] mesh dim name is empty"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|a b=2|0,1|0,1|x,y"), MeshError,
                       Message("[Mesh::from_string] mesh dim name 'a b' has character ' ' "
                               "(allowed: letters, digits, _-.)"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|a=-1|0|0|x"), MeshError,
                       Message("[Mesh::from_string] mesh dim 'a' has size -1; sizes must be >= 1"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|a=99999999999999999999|0|0|x"), MeshError,
                       Message("[parse_mesh_dims] bad mesh dim 'a=99999999999999999999' in "
                               "'a=99999999999999999999' (expected name=size)"));
}

TEST_CASE("regression: huge meshes are a MeshError, not std::bad_alloc") {
  using Catch::Message;
  CHECK_THROWS_MATCHES(Mesh::create({{"x", int64_t{1} << 40}}, DeviceType::kCPU), MeshError,
                       Message("[Mesh::create] mesh x=1099511627776 has more than 1048576 "
                               "devices"));
  CHECK_THROWS_MATCHES(
      Mesh::create({{"x", int64_t{1} << 32}, {"y", int64_t{1} << 32}}, DeviceType::kCPU), MeshError,
      Message("[Mesh::create] mesh x=4294967296,y=4294967296 has more than 1048576 "
              "devices"));
}

TEST_CASE("regression: local ids far outside the mesh are rejected") {
  using Catch::Message;
  const std::string dev = "/job:localhost/replica:0/task:0/device:CPU:0";
  CHECK_THROWS_MATCHES(
      Mesh::from_string("|x=1|0|9223372036854775807|" + dev), MeshError,
      Message("[Mesh::from_string] local device ids [9223372036854775807] are not a contiguous "
              "block [k*1, (k+1)*1) of 0..0"));
  CHECK_THROWS_MATCHES(Mesh::from_string("|x=2|0,1|-2,-1|" + dev + "," + dev), MeshError,
                       Message("[Mesh::from_string] local device ids [-2,-1] are not a contiguous "
                               "block [k*2, (k+1)*2) of 0..1"));
}

TEST_CASE("regression: mesh queries check their arguments") {
  using Catch::Message;
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  // coord used to read past the strides (ASan heap-buffer-overflow).
  CHECK_THROWS_MATCHES(mesh.coord(0, 2), MeshError,
                       Message("[Mesh::coord] mesh dim index 2 is out of range for mesh x=2,y=4 "
                               "(rank 2)"));
  CHECK_THROWS_MATCHES(mesh.coord(0, -1), MeshError,
                       Message("[Mesh::coord] mesh dim index -1 is out of range for mesh x=2,y=4 "
                               "(rank 2)"));
  CHECK_THROWS_MATCHES(mesh.coord(8, 0), MeshError,
                       Message("[Mesh::coord] device id 8 is out of range for mesh x=2,y=4 (8 "
                               "devices)"));
  CHECK_THROWS_MATCHES(mesh.coords(-1), MeshError,
                       Message("[Mesh::coords] device id -1 is out of range for mesh x=2,y=4 (8 "
                               "devices)"));
  CHECK_THROWS_MATCHES(mesh.group(8, 1), MeshError,
                       Message("[Mesh::group] device id 8 is out of range for mesh x=2,y=4 (8 "
                               "devices)"));
  CHECK_THROWS_MATCHES(mesh.group(0, 4), MeshError,
                       Message("[Mesh::group] dim mask 0x4 names dims beyond mesh x=2,y=4 (rank "
                               "2)"));
  CHECK_THROWS_MATCHES(mesh.groups(0x80000000u), MeshError,
                       Message("[Mesh::groups] dim mask 0x80000000 names dims beyond mesh x=2,y=4 "
                               "(rank 2)"));
  CHECK_THROWS_MATCHES(mesh.group_size(8), MeshError,
                       Message("[Mesh::group_size] dim mask 0x8 names dims beyond mesh x=2,y=4 "
                               "(rank 2)"));
  CHECK_THROWS_MATCHES(mesh.index_in_group(100, 1), MeshError,
                       Message("[Mesh::index_in_group] device id 100 is out of range for mesh "
                               "x=2,y=4 (8 devices)"));
  CHECK_THROWS_MATCHES(mesh.owner_process(8), MeshError,
                       Message("[Mesh::owner_process] device id 8 is out of range for mesh x=2,y=4 "
                               "(8 devices)"));
  CHECK_THROWS_AS(mesh.local_index(8), MeshError);
  CHECK_FALSE(mesh.is_local(-1));
  CHECK(mesh.group(5, 3).size() == 8);
  CHECK(mesh.coord(7, 1) == 3);
}

// Regression: a process-local mesh and a mesh spanning processes over the same dims share the
// global part (fingerprint()) but are different meshes; caches key on identity_fingerprint().
TEST_CASE("regression: a process-local and a spanning mesh over the same dims are told apart") {
  const Mesh local = Mesh::create({{"replica", 4}}, DeviceType::kCPU);
  const Mesh spanning = Mesh::create({{"replica", 4}}, DeviceType::kCPU, 0, 2);
  CHECK(local != spanning);
  CHECK(local.fingerprint() == spanning.fingerprint());
  CHECK(local.identity_fingerprint() != spanning.identity_fingerprint());
  CHECK(spanning.identity_fingerprint() ==
        Mesh::create({{"replica", 4}}, DeviceType::kCPU, 0, 2).identity_fingerprint());
  CHECK(spanning.identity_fingerprint() !=
        Mesh::create({{"replica", 4}}, DeviceType::kCPU, 1, 2).identity_fingerprint());
  CHECK(local.identity_string() == "replica=4 (CPU, process-local, ids 0-3)");
  CHECK(Mesh::create({{"replica", 4}}, DeviceType::kGPU, 1, 2, "m").identity_string() ==
        "'m' replica=4 (GPU, spans 2 processes, local ids 2-3)");
  // Dims that differ are enough; alike dims get the long form.
  CHECK(distinct_mesh_strings(local, Mesh::create({{"x", 4}}, DeviceType::kCPU)) ==
        std::pair<std::string, std::string>{"replica=4", "x=4"});
  CHECK(distinct_mesh_strings(local, spanning).second ==
        "replica=4 (CPU, spans 2 processes, local ids 0-1)");
}
