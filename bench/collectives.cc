// In-process collectives and relayout on 8 virtual CPU devices, next to memcpy of the same size
// measured in the same run.
//
//   memcpy      bytes / time
//   all_reduce  (N+1) * bytes / time: N inputs read, one result written (shared by all devices)
//   relayout    global bytes / time, for rows -> cols (one all-to-all) and rows -> replicated
//               (one all-gather into one shared buffer)
#include <cstring>
#include <optional>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/collectives.h"
#include "dtensor/relayout.h"

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("collectives",
                            "In-process all-reduce and relayouts on 8 virtual CPUs next to memcpy. "
                            "Prints one JSON object per measurement.");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  using namespace dtensor;
  constexpr int64_t kDevices = 8;
  Mesh mesh = Mesh::create({{"batch", kDevices}}, DeviceType::kCPU);
  for (int64_t bytes = 1 << 10; bytes <= (int64_t{64} << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    const int reps = bytes >= (16 << 20) ? 7 : 25;
    auto field = [&](const char* op) {
      return std::vector<bench::Field>{
          {"op", std::string(op)}, {"bytes", bytes}, {"devices", kDevices}};
    };

    Tensor src = Tensor::zeros({n}, DType::kF32);
    Tensor dst = Tensor::zeros({n}, DType::kF32);
    double t = bench::median_seconds(
        [&] { std::memcpy(dst.raw_data(), src.raw_data(), static_cast<size_t>(bytes)); }, reps);
    bench::report("collectives", field("memcpy"), bytes / t / 1e9, "GB/s");

    std::vector<Tensor> shards;
    for (int64_t d = 0; d < kDevices; ++d) {
      shards.push_back(Tensor::zeros({n}, DType::kF32, Device{DeviceType::kCPU, d}));
    }
    t = bench::median_seconds(
        [&] { bench::do_not_optimize(all_reduce(mesh, 1, shards, ReduceOp::kSum)); }, reps);
    bench::report("collectives", field("all_reduce"), (kDevices + 1) * bytes / t / 1e9, "GB/s");

    // A square-ish matrix of `bytes`, rows sharded.
    int64_t cols = 64;
    while (cols * cols * 4 < bytes) cols *= 2;
    const int64_t rows = std::max<int64_t>(kDevices, n / cols);
    const double global_bytes = static_cast<double>(rows * cols * 4);
    Layout by_rows = Layout::batch_sharded(mesh, "batch", 2, 0);
    DTensor x = DTensor::from_trusted_shards({rows, cols}, DType::kF32, by_rows, [&] {
      std::vector<Tensor> parts;
      for (int64_t d = 0; d < kDevices; ++d) {
        parts.push_back(Tensor::zeros(by_rows.shard_shape({rows, cols}, d), DType::kF32,
                                      Device{DeviceType::kCPU, d}));
      }
      return parts;
    }());
    Layout by_cols = Layout::batch_sharded(mesh, "batch", 2, 1);
    t = bench::median_seconds([&] { bench::do_not_optimize(relayout(x, by_cols)); }, reps);
    auto f = field("relayout");
    f.push_back({"transition", std::string("rows->cols")});
    bench::report("collectives", f, global_bytes / t / 1e9, "GB/s");
    Layout rep = Layout::replicated(mesh, 2);
    t = bench::median_seconds([&] { bench::do_not_optimize(relayout(x, rep)); }, reps);
    f.back().second = std::string("rows->replicated");
    bench::report("collectives", f, global_bytes / t / 1e9, "GB/s");
  }
}
