// The minimal program of docs/getting_started.md: a mesh, two sharded tensors, a matmul, printing.
//
//   tools/bazel run //examples/hello:main
//   mpirun -np 2 bazel-bin/examples/hello/main      (4 virtual CPUs in each process)
#include <fmt/format.h>

#include "dtensor/creation.h"
#include "dtensor/print.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "ops/ops.h"

int main(int argc, char** argv) {
  return dtensor::run_main(argc, argv, [](dtensor::Runtime& rt) {
    using namespace dtensor;
    // 8 devices in all: 8 virtual CPUs alone, 4 per process under mpirun -np 2.
    Mesh mesh = create_mesh("batch=2,model=4");
    DTensor x = random_uniform({4, 6}, Layout({"batch", "unsharded"}, mesh), /*seed=*/1);
    DTensor w = random_uniform({6, 8}, Layout({"unsharded", "model"}, mesh), /*seed=*/2);
    DTensor y = relu(matmul(x, w));  // rows over batch, columns over model: no communication
    // Printing gathers the values: every process must take part.
    std::string text = fmt::format("{}\n{}\n", mesh, y);
    if (rt.process_index() == 0) fmt::print("{}", text);
    return 0;
  });
}
