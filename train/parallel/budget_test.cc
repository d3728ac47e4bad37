// The collective budget of one captured training step (forward, backward, Adam) of a small
// TransformerLM under each plan on 8 virtual devices, by kind, mesh dim and bytes
// (Function::collective_summary), against formulas in the number of layers L. Bytes count every
// local device's input shard (as CollectiveStats does), f32.
#include <catch2/catch.hpp>

#include <functional>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"
#include "train/parallel/transformer.h"

using namespace dtensor;
using namespace dtensor::parallel;
using dtensor::testing::test_mesh;

namespace {

constexpr int64_t kVocab = 16, kDim = 16, kHidden = 32, kBatch = 8, kSeq = 8, kDevices = 8;
constexpr int64_t kF32 = 4;

// Weights: embedding, 8 per block, final norm, head.
int64_t weights(int64_t layers) { return 3 + 8 * layers; }
// Elements of the norm gains and of the other (matrix) weights.
int64_t norm_elements(int64_t layers) { return kDim * (2 * layers + 1); }
int64_t matrix_elements(int64_t layers) {
  return 2 * kVocab * kDim + layers * (4 * kDim * kDim + 2 * kDim * kHidden);
}
// One residual-stream activation [B, T, D] batch-sharded over data=2: what each of the 8 devices
// holds, summed over devices.
constexpr int64_t kResidualBytes = kDevices * (kBatch / 2) * kSeq * kDim * kF32;
// A [B, T] per-token value (the loss's max, sum, picked logit), batch-sharded over data=2.
constexpr int64_t kTokenBytes = kDevices * (kBatch / 2) * kSeq * kF32;
// One norm gain's gradient, replicated: [D] on every device.
constexpr int64_t kGainBytes = kDevices * kDim * kF32;

CollectiveSummary step_budget(const Mesh& mesh, const ParallelPlan& plan, int64_t layers) {
  TransformerConfig c;
  c.vocab = kVocab;
  c.dim = kDim;
  c.heads = 4;
  c.layers = layers;
  c.hidden = kHidden;
  c.dropout = 0.1;
  TransformerLM model(c, mesh);
  model.parallelize(plan);
  Adam adam(1e-3);
  const std::vector<DVariable> vars = model.variables();
  Function step = function([&](const std::vector<DTensor>& a) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor loss = reduce_mean(lm_loss()(a[1], model.call(a[0], true)));
    adam.apply(vars, tape.gradient(loss, vars));
    return std::vector<DTensor>{loss};
  });
  const DTensor x = distribute(Tensor::zeros({kBatch, kSeq}, DType::kI32),
                               Layout::batch_sharded(mesh, "data", 2));
  step({x, x});
  step({x, x});  // a replay: the budget is the program's, the same on every step
  CHECK(step.replay_count() == 1);
  return step.collective_summary({x, x});
}

struct Expected {
  CollectiveKind kind;
  std::string dims;
  int64_t calls, bytes;
};

void check_budget(const Mesh& mesh, const ParallelPlan& plan,
                  const std::function<std::vector<Expected>(int64_t)>& formula) {
  for (int64_t layers : {1, 2}) {
    const CollectiveSummary got = step_budget(mesh, plan, layers);
    INFO(mesh.dims_string() << " plan " << plan.to_string() << " layers " << layers << "\n"
                            << got.to_string());
    int64_t calls = 0;
    for (const Expected& e : formula(layers)) {
      INFO(collective_kind_name(e.kind) << " over " << e.dims);
      CHECK(got.calls(e.kind, e.dims) == e.calls);
      CHECK(got.bytes(e.kind, e.dims) == e.bytes);
      calls += e.calls;
    }
    CHECK(got.total_calls() == calls);  // nothing else
  }
}

}  // namespace

TEST_CASE("data parallel: one all-reduce per weight gradient") {
  check_budget(test_mesh({{"data", 8}}), {"data", "", "", false}, [](int64_t L) {
    const int64_t elements = matrix_elements(L) + norm_elements(L);
    return std::vector<Expected>{
        {CollectiveKind::kAllReduce, "data", weights(L), kDevices * elements * kF32}};
  });
}

TEST_CASE("fully sharded: one all-gather and one reduce-scatter per weight") {
  check_budget(test_mesh({{"data", 8}}), {"data", "", "", true}, [](int64_t L) {
    const int64_t elements = matrix_elements(L) + norm_elements(L);
    return std::vector<Expected>{
        // Each device sends its 1/8 of every weight, and the full gradient to be scattered.
        {CollectiveKind::kAllGather, "data", weights(L), elements * kF32},
        {CollectiveKind::kReduceScatter, "data", weights(L), kDevices * elements * kF32}};
  });
}

TEST_CASE("resharding after forward: the matrices are gathered again for backward") {
  check_budget(test_mesh({{"data", 8}}), {"data", "", "", true, true}, [](int64_t L) {
    const int64_t elements = matrix_elements(L) + norm_elements(L);
    // Every matrix but the embedding table (read by gather, not by a product): six per layer and
    // the head, each device sending its 1/8 once more.
    const int64_t regathered = matrix_elements(L) - kVocab * kDim;
    return std::vector<Expected>{
        {CollectiveKind::kAllGather, "data", weights(L) + 6 * L + 1,
         (elements + regathered) * kF32},
        {CollectiveKind::kReduceScatter, "data", weights(L), kDevices * elements * kF32}};
  });
}

TEST_CASE("tensor parallel: Megatron's all-reduces, plus the loss-parallel ones") {
  check_budget(test_mesh({{"data", 2}, {"model", 4}}), {"data", "model", "", false}, [](int64_t L) {
    // Gradients over data: matrices sharded 4 ways, gains whole.
    const int64_t grad_bytes = kDevices * (matrix_elements(L) / 4 + norm_elements(L)) * kF32;
    return std::vector<Expected>{
        {CollectiveKind::kAllReduce, "data", weights(L), grad_bytes},
        // Per layer: the attention and MLP outputs (forward), their inputs' gradients (backward),
        // the two gains' gradients. Once: the embedding (forward), the head input's gradient, the
        // final gain; the loss's max, sum and picked logit, and the two of its softmax gradient.
        {CollectiveKind::kAllReduce, "model", 8 + 6 * L,
         L * (4 * kResidualBytes + 2 * kGainBytes) + 2 * kResidualBytes + kGainBytes +
             5 * kTokenBytes}};
  });
}

TEST_CASE("tensor + sequence parallel: all-gathers before colwise, reduce-scatters after rowwise") {
  check_budget(
      test_mesh({{"data", 2}, {"model", 4}}), {"data", "model", "model", false}, [](int64_t L) {
        const int64_t grad_bytes = kDevices * (matrix_elements(L) / 4 + norm_elements(L)) * kF32;
        // A sequence-sharded residual, what each device sends to an all-gather.
        const int64_t sharded = kResidualBytes / 4;
        return std::vector<Expected>{
            {CollectiveKind::kAllReduce, "data", weights(L), grad_bytes},
            // The gains' gradients and the loss's five; the residual ones are gone.
            {CollectiveKind::kAllReduce, "model", 6 + 2 * L,
             (2 * L + 1) * kGainBytes + 5 * kTokenBytes},
            // Per layer: before attention and MLP (forward), the VJPs of the two
            // reduce-scatters; once: before the head, and the VJP of the embedding's
            // reduce-scatter.
            {CollectiveKind::kAllGather, "model", 2 + 4 * L, (4 * L + 2) * sharded},
            // Per layer: after attention and MLP, the VJPs of the two all-gathers; once:
            // the embedding and the head input's gradient.
            {CollectiveKind::kReduceScatter, "model", 2 + 4 * L, (4 * L + 2) * kResidualBytes}};
      });
}

TEST_CASE("3-D: data=2, seq=2, model=2 with fully sharded weights") {
  check_budget(
      test_mesh({{"data", 2}, {"seq", 2}, {"model", 2}}), {"data", "model", "seq", true},
      [](int64_t L) {
        const int64_t matrices = matrix_elements(L), gains = norm_elements(L);
        return std::vector<Expected>{
            // FSDP over data: every device sends its stored quarter of a matrix (model and data
            // split it) or half of a gain, and the gradient in the compute layout (matrices split
            // over model, gains whole).
            {CollectiveKind::kAllGather, "data", weights(L),
             kDevices * (matrices / 4 + gains / 2) * kF32},
            {CollectiveKind::kReduceScatter, "data", weights(L),
             kDevices * (matrices / 2 + gains) * kF32},
            // Pinned from the captured program (the sequence-sharded attention gathers its keys
            // and values over seq and the gradients come back over it; see docs/transformer.md).
            {CollectiveKind::kAllReduce, "model", 8 + 6 * L, 19200 + 33280 * L},
            {CollectiveKind::kAllReduce, "seq", 3 + 11 * L, 4352 + 23040 * L},
            {CollectiveKind::kAllGather, "seq", 2 * L, 8192 * L},
            {CollectiveKind::kReduceScatter, "seq", 13 * L, 90112 * L},
            {CollectiveKind::kAllToAll, "seq", L, 8192 * L}};
      });
}
