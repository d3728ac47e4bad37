// The CIFAR-10 tutorial CNN's training step on the CPU (bench/cnn_training.h: a fixed batch of 128
// 24x24x3 images, as bench/peers_cnn.py times PyTorch) on each mesh and precision policy given,
// in interleaved rounds: every round runs --steps timed steps of each setup in turn, so a change
// in the machine's load falls on all of them. One JSON line per setup: the median step time over
// all rounds, in ms, with examples/s. The oneDNN ISA cap (DNNL_MAX_CPU_ISA, e.g. AVX2 for the
// path of an AVX2-only host) is printed with it.
//   bazel-bin/bench/cnn_step --rounds=5 --steps=10 --meshes=batch=8,batch=1
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cnn_training.h"
#include "bench/report.h"
#include "cli/flags.h"

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtensor;
  int64_t rounds = 5, steps = 10, batch = 128;
  std::string meshes = "batch=8,batch=1", precisions = "float32,mixed_bfloat16";
  cli::Flags flags("cnn_step", "The CIFAR-10 CNN's training step, interleaved setups.");
  flags.add_int("--rounds", &rounds, "interleaved rounds", 1, 1000);
  flags.add_int("--steps", &steps, "timed steps of each setup per round", 1, 1000);
  flags.add_int("--batch", &batch, "global batch", 1, 1 << 16);
  flags.add_string("--meshes", &meshes, "comma-separated meshes, e.g. batch=8,batch=1");
  flags.add_string("--precisions", &precisions, "comma-separated: float32, mixed_bfloat16");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;

  struct Setup {
    std::string mesh, precision;
    std::unique_ptr<bench::CnnTraining> training;
    std::vector<double> ms;
  };
  std::vector<Setup> setups;
  for (const std::string& spec : split(meshes)) {
    for (const std::string& precision : split(precisions)) {
      const Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU);
      setups.push_back(
          {spec,
           precision,
           std::make_unique<bench::CnnTraining>(mesh, batch, Policy::from_name(precision)),
           {}});
      for (int i = 0; i < 3; ++i) setups.back().training->step();  // primitives, buffers
    }
  }
  for (int64_t r = 0; r < rounds; ++r) {
    for (Setup& s : setups) {
      for (int64_t i = 0; i < steps; ++i) {
        const auto start = std::chrono::steady_clock::now();
        s.training->step();
        s.ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
      }
    }
  }
  const char* isa = std::getenv("DNNL_MAX_CPU_ISA");
  for (const Setup& s : setups) {
    const double ms = median(s.ms);
    bench::report("cnn_step",
                  {{"mesh", s.mesh},
                   {"precision", s.precision},
                   {"batch", batch},
                   {"onednn_isa", std::string(isa ? isa : "native")},
                   {"examples_per_s", static_cast<double>(batch) / ms * 1e3},
                   {"steps", static_cast<int64_t>(s.ms.size())}},
                  ms, "ms/step");
  }
}
