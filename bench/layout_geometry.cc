// Cost of the shard geometry every op and relayout asks for: shard_shape + shard_offset of one
// device, for a rank-3 tensor on a 2x2x2 mesh with one uneven dim.
#include "bench/report.h"
#include "cli/flags.h"
#include "layout/layout.h"

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("layout_geometry",
                            "Cost of shard_shape + shard_offset per call on a 2x2x2 mesh. Prints "
                            "one JSON object per measurement.");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  using namespace dtensor;
  Mesh mesh = Mesh::create({{"a", 2}, {"b", 2}, {"c", 2}}, DeviceType::kCPU);
  Layout layout({"a", "unsharded", "c"}, mesh);
  Shape global = {1023, 64, 257};
  constexpr int kCalls = 100000;
  double seconds = bench::median_seconds([&] {
    for (int i = 0; i < kCalls; ++i) {
      bench::do_not_optimize(layout.shard_shape(global, i % 8));
      bench::do_not_optimize(layout.shard_offset(global, i % 8));
    }
  });
  bench::report("layout_geometry", {{"mesh", std::string("a=2,b=2,c=2")}, {"rank", int64_t{3}}},
                seconds / kCalls * 1e9, "ns/call");
}
