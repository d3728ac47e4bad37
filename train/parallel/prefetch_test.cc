// FSDP prefetch (train/parallel/prefetch.h): the captured step starts block i+1's gathers before
// block i computes and block i-1's when block i's backward begins, takes each gathered weight
// after its gather ran, holds at most two blocks' gathered weights at the peak (the one computing
// and the one prefetched), and reports bad use with exact errors.
#include <catch2/catch.hpp>

#include <sstream>

#include "dtensor/creation.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "train/parallel/lm_trainer.h"

using namespace dtensor;
using namespace dtensor::parallel;
using Catch::Message;
using dtensor::testing::test_mesh;

namespace {

TransformerConfig three_layers() {
  TransformerConfig c;
  c.vocab = 24;
  c.dim = 32;
  c.heads = 4;
  c.layers = 3;
  c.seed = 5;
  return c;
}

DTensor make_tokens(const Mesh& mesh) {
  Tensor t = Tensor::empty({8, 16}, DType::kI32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int32_t>()[i] = (i * 5 + i / 3) % 24;
  return distribute(t, Layout::batch_sharded(mesh, "data", 2));
}

// Three blocks on data=8 under `plan`, and its tokens (labels too).
struct Trainer3 : LmTrainer {
  explicit Trainer3(const ParallelPlan& plan)
      : LmTrainer(three_layers(), test_mesh({{"data", 8}}), plan, 1e-3),
        tokens(make_tokens(mesh())) {}
  std::string program() { return captured().program_string({tokens, tokens}); }
  DTensor tokens;
};

// The prefetch calls of a captured program, in order: S (a flight started), T (a weight taken),
// M (a compute mark).
std::string prefetch_calls(const std::string& program) {
  std::string out;
  std::istringstream in(program);
  for (std::string op; std::getline(in, op, ',');) {
    op.erase(0, op.find_first_not_of(' '));
    if (op == "fsdp_gather_start") out += 'S';
    if (op == "fsdp_gather_take") out += 'T';
    if (op == "timeline_mark") out += 'M';
  }
  return out;
}

}  // namespace

TEST_CASE("the captured step starts the next block's gathers before this block computes") {
  Trainer3 s({"data", "", "", true, true, true});
  s.step(s.tokens, s.tokens);
  const std::string t8(8, 'T'), t6(6, 'T');
  // Forward: block 0's flight, then per block: the next block's flight, this block's 8 takes
  // (norms and matmuls), its compute marks. Backward (block 2 first): its mark, its own flight
  // and block 1's, 6 takes (the matmul weights, one per VJP), the closing mark; block 1 starts
  // block 0's; block 0 starts none.
  const std::string forward = "S" + ("S" + t8 + "MM") + ("S" + t8 + "MM") + (t8 + "MM");
  const std::string backward = ("MSS" + t6 + "M") + ("MS" + t6 + "M") + ("M" + t6 + "M");
  CHECK(prefetch_calls(s.program()) == forward + backward);
  // Without resharding, backward uses the weights kept from forward.
  Trainer3 kept({"data", "", "", true, false, true});
  kept.step(kept.tokens, kept.tokens);
  CHECK(prefetch_calls(kept.program()) == forward);
}

TEST_CASE("a replayed step's timeline has every gather done before its block computes") {
  Trainer3 s({"data", "", "", true, true, true});
  s.step(s.tokens, s.tokens);  // trace
  s.model().timeline().enable();
  s.step(s.tokens, s.tokens);  // replay
  const std::vector<Timeline::Span> spans = s.model().timeline().spans();
  auto find = [&](const std::string& name) {
    for (const Timeline::Span& sp : spans) {
      if (sp.name == name) return sp;
    }
    FAIL("no span " << name);
    return Timeline::Span{};
  };
  CHECK(spans.size() == 3 * 4);  // per block: two gathers, forward and backward compute
  for (int i = 0; i < 3; ++i) {
    const std::string b = "block" + std::to_string(i);
    INFO(b);
    const Timeline::Span fg = find(b + " gather (forward)"), fc = find(b + " forward");
    const Timeline::Span bg = find(b + " gather (backward)"), bc = find(b + " backward");
    CHECK(fg.lane == "gather");
    CHECK(fc.lane == "compute");
    CHECK(fg.end_us <= fc.begin_us);  // taken after it ran
    CHECK(fc.begin_us <= fc.end_us);
    CHECK(bg.end_us <= bc.end_us);
    CHECK(fc.end_us <= bc.begin_us);
  }
  const std::string json = s.model().timeline().chrome_trace_json();
  CHECK(json.find("\"name\": \"block1 gather (forward)\", \"ph\": \"X\"") != std::string::npos);
  CHECK(json.find("\"args\": {\"name\": \"gather\"}") != std::string::npos);
}

TEST_CASE("prefetching holds two blocks of gathered weights at the peak, not more") {
  const TransformerConfig c = three_layers();
  const int64_t d = c.dim, h = 4 * c.dim;
  const int64_t block_params = 4 * (4 * d * d + 2 * d * h + 2 * d);
  auto peak = [](const ParallelPlan& plan) {
    Trainer3 s(plan);
    s.model().gather_meter().reset();
    s.eager_step(s.tokens, s.tokens);
    return s.model().gather_meter().peak_bytes();
  };
  const int64_t plain = peak({"data", "", "", true, true});
  const int64_t prefetched = peak({"data", "", "", true, true, true});
  INFO("gathered peak: reshard " << plain << ", reshard + prefetch " << prefetched << ", block "
                                 << block_params);
  // The embedding table and the head are gathered outside the blocks and kept for backward.
  const int64_t outside = 2 * 4 * d * c.vocab;
  CHECK(plain <= block_params + outside);  // about one weight at a time
  CHECK(prefetched > block_params);        // a whole block, and the next one in flight
  CHECK(prefetched <= 2 * block_params + outside);
}

TEST_CASE("prefetch errors name the flight") {
  const Mesh mesh = test_mesh({{"data", 8}});
  GatherThread thread(mesh);
  CHECK_FALSE(thread.runs_inline());
  const DTensor w = random_uniform({16, 4}, Layout::batch_sharded(mesh, "data", 2), 1);
  CHECK_THROWS_MATCHES(start_gathers(thread, {w}, {}, "block7 gather"), InvalidArgumentError,
                       Message("[start_gathers] block7 gather: 1 stored values and 0 layouts"));
  GatherFlight flight = start_gathers(thread, {w}, {Layout::replicated(mesh, 2)}, "block7 gather");
  const DTensor full = flight.take(0);
  CHECK(full.layout() == Layout::replicated(mesh, 2));
  CHECK(to_global(full).num_elements() == 64);
  CHECK_THROWS_MATCHES(flight.take(0), InvalidArgumentError,
                       Message("[GatherFlight::take] value 0 of block7 gather was taken before"));
  CHECK_THROWS_MATCHES(flight.take(3), InvalidArgumentError,
                       Message("[GatherFlight::take] value 3 of block7 gather: it has 1"));
  // A mesh spanning processes gathers on the calling thread, in program order.
  const Mesh two = Mesh::create({{"data", 8}}, DeviceType::kCPU, 0, 2);
  CHECK(GatherThread(two).runs_inline());
}
