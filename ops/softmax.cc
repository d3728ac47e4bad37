// The softmax family and its losses: softmax, log_softmax, logsumexp and
// sparse_softmax_cross_entropy along one axis. With that axis unsharded each device runs the
// fused local kernel; with it sharded the op is composed from DTensor ops (two small all-reduces
// of [..., 1] values instead of gathering the axis), with the kernels' non-finite rules.
#include "dtensor/creation.h"
#include "dtensor/host_copy.h"
#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"
#include "ops/expand.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

// The same error on every layout: the sharded path never reaches the fused kernel's check, and
// would otherwise fail in one of the ops it is composed of, under that op's name.
void check_floating(const char* op, const DTensor& x) {
  if (!is_floating(x.dtype())) {
    throw_error<DTypeError>(op, "unsupported dtype {}: {}", dtype_name(x.dtype()),
                            x.short_string());
  }
}

// The deterministic mode composes the ops on every layout: one device then sums the axis in the
// chunks a sharded axis is summed in (ops/expand.h).
bool axis_sharded(const DTensor& x, int64_t axis) {
  return deterministic_sums() || x.layout().is_sharded(axis);
}

// The fused local kernel along an unsharded `axis` (dropped, or kept as size 1 with
// `keepdims`, when `drops_axis`).
DTensor along_axis(const char* name, const DTensor& x, int64_t axis, bool keepdims, bool drops_axis,
                   Tensor (*kernel)(const Tensor&, int64_t, bool)) {
  OpSignature sig{
      name,
      axes_attributes({axis}, keepdims),
      {{iota_letters(x.rank()), false}},
      drops_axis ? reduced_letters(x.rank(), {axis}, keepdims) : iota_letters(x.rank())};
  Shape out = drops_axis ? reduced_shape(x.shape(), {axis}, keepdims) : x.shape();
  return expand(sig, {&x}, out, x.dtype(), 4.0 * static_cast<double>(x.num_elements()),
                [=](const Shards& s) { return kernel(s[0], axis, keepdims); });
}

// The softmax family over a sharded axis, from the pieces the kernels use (kernels::softmax):
// x without partial terms, shift = softmax_shift(global max), the exps of x - shift and their
// global sum. Two small all-reduces ([..., 1] each) instead of gathering the axis, and the same
// non-finite results as one device: the shift rule keeps x - shift from being inf - inf.
struct SoftmaxPieces {
  DTensor x, shift, shifted, exps, sum;  // shifted = x - shift; shift and sum keep the axis
};

SoftmaxPieces softmax_pieces(const DTensor& x_in, int64_t axis) {
  const DTensor x = without_partial(x_in);  // reduced once here rather than in each consumer
  DTensor max = reduce_max(x, {axis}, true);
  max = relayout(max, max.layout().without_partial());
  OpSignature sig{
      "softmax_shift", {}, {{iota_letters(max.rank()), false}}, iota_letters(max.rank())};
  DTensor shift =
      expand(sig, {&max}, max.shape(), max.dtype(), static_cast<double>(max.num_elements()),
             [](const Shards& s) { return kernels::softmax_shift(s[0]); });
  DTensor shifted = sub(x, shift);
  DTensor exps = exp(shifted);
  DTensor sum = reduce_sum(exps, {axis}, true);
  sum = relayout(sum, sum.layout().without_partial());
  return {x, shift, shifted, exps, sum};
}

}  // namespace

// ---- softmax ---------------------------------------------------------------------------------

namespace {

Tensor softmax_kernel(const Tensor& x, int64_t axis, bool) { return kernels::softmax(x, axis); }

DTensor softmax_forward(const DTensor& x, int64_t axis) {
  check_floating("softmax", x);
  if (!axis_sharded(x, axis)) return along_axis("softmax", x, axis, false, false, softmax_kernel);
  SoftmaxPieces p = softmax_pieces(x, axis);
  return div(p.exps, p.sum);
}

}  // namespace

DTensor softmax(const DTensor& x, int64_t axis) {
  axis = checked_axis("softmax", x, axis);
  return recorded(
      {&x}, [&] { return softmax_forward(x, axis); },
      [&](const DTensor& y) {
        return [y, axis](const DTensor& g) -> Grads {
          DTensor dot = reduce_sum(mul(g, y), {axis}, true);
          return {mul(y, sub(g, dot))};
        };
      });
}

// ---- log_softmax -----------------------------------------------------------------------------

namespace {

Tensor log_softmax_kernel(const Tensor& x, int64_t axis, bool) {
  return kernels::log_softmax(x, axis);
}

DTensor log_softmax_forward(const DTensor& x, int64_t axis) {
  check_floating("log_softmax", x);
  if (!axis_sharded(x, axis)) {
    return along_axis("log_softmax", x, axis, false, false, log_softmax_kernel);
  }
  SoftmaxPieces p = softmax_pieces(x, axis);
  return sub(p.shifted, log(p.sum));
}

}  // namespace

DTensor log_softmax(const DTensor& x, int64_t axis) {
  axis = checked_axis("log_softmax", x, axis);
  return recorded(
      {&x}, [&] { return log_softmax_forward(x, axis); },
      [&](const DTensor& y) {
        return [y, axis](const DTensor& g) -> Grads {
          DTensor total = reduce_sum(g, {axis}, true);
          return {sub(g, mul(exp(y), total))};
        };
      });
}

// ---- logsumexp -------------------------------------------------------------------------------

namespace {

Tensor logsumexp_kernel(const Tensor& x, int64_t axis, bool keepdims) {
  return kernels::logsumexp(x, axis, keepdims);
}

DTensor logsumexp_forward(const DTensor& x, int64_t axis, bool keepdims) {
  check_floating("logsumexp", x);
  if (!axis_sharded(x, axis)) {
    return along_axis("logsumexp", x, axis, keepdims, true, logsumexp_kernel);
  }
  SoftmaxPieces p = softmax_pieces(x, axis);
  DTensor lse = add(p.shift, log(p.sum));
  return keepdims ? lse : reshape(lse, reduced_shape(x.shape(), {axis}, false));
}

}  // namespace

DTensor logsumexp(const DTensor& x, int64_t axis, bool keepdims) {
  axis = checked_axis("logsumexp", x, axis);
  return recorded(
      {&x}, [&] { return logsumexp_forward(x, axis, keepdims); },
      [&](const DTensor& y) {
        return [x, y, axis, keepdims](const DTensor& g) -> Grads {
          DTensor y_full = unreduce(y, x, {axis}, keepdims);
          return {mul(unreduce(g, x, {axis}, keepdims), exp(sub(x, y_full)))};
        };
      });
}

// ---- sparse_softmax_cross_entropy ------------------------------------------------------------

namespace {

int64_t label_at(const Tensor& shard, int64_t e) {
  return shard.dtype() == DType::kI32 ? shard.data<int32_t>()[e] : shard.data<int64_t>()[e];
}

// Whether every label of `shard` lies in [0, classes): one scan of host memory, with no
// allocation; on a device, its min and max reduced there and the two scalars read back.
bool shard_labels_in_range(const Tensor& shard, int64_t classes) {
  if (shard.memory_space() != MemorySpace::kHost) {
    if (shard.num_elements() == 0) return true;
    auto extreme = [&](kernels::ReduceKind kind) {
      return label_at(host_readable(kernels::reduce(kind, shard, {}, false)), 0);
    };
    return extreme(kernels::ReduceKind::kMin) >= 0 && extreme(kernels::ReduceKind::kMax) < classes;
  }
  bool all_in_range = true;
  for (int64_t e = 0; e < shard.num_elements(); ++e) {
    const int64_t label = label_at(shard, e);
    all_in_range = all_in_range && label >= 0 && label < classes;
  }
  return all_in_range;
}

// Labels outside [0, classes) throw the kernel's error, naming the label's global position, on
// every layout: the class-sharded expansion never runs the kernel's check, and the kernel would
// name a position within its shard. Positions are worked out only for a bad label, from host
// copies of the shards.
void check_labels_in_range(const DTensor& labels, int64_t classes) {
  const DTensor whole = without_partial(labels);
  bool all_in_range = true;
  for (const Tensor& shard : whole.shards()) {
    all_in_range = all_in_range && shard_labels_in_range(shard, classes);
  }
  if (all_in_range) return;
  const Mesh& mesh = labels.mesh();
  const Layout plain = labels.layout().without_partial();
  int64_t worst = -1, value = 0;  // the first bad label in global order, and its value
  for (size_t i = 0; i < whole.shards().size(); ++i) {
    const Tensor shard = host_readable(whole.shards()[i]);
    const int64_t device = mesh.local_device_ids()[i];
    const std::vector<int64_t> offset = plain.shard_offset(labels.shape(), device);
    for (int64_t e = 0; e < shard.num_elements(); ++e) {
      const int64_t label = label_at(shard, e);
      if (label >= 0 && label < classes) continue;
      int64_t flat = 0, rest = e;  // the global flat position of local element e
      std::vector<int64_t> local(shard.shape().size());
      for (size_t d = local.size(); d-- > 0;) {
        local[d] = rest % shard.shape()[d];
        rest /= shard.shape()[d];
      }
      for (size_t d = 0; d < local.size(); ++d) {
        flat = flat * labels.shape()[d] + offset[d] + local[d];
      }
      if (worst < 0 || flat < worst) {
        worst = flat;
        value = label;
      }
    }
  }
  std::vector<int64_t> position(labels.shape().size());
  for (size_t d = position.size(); d-- > 0;) {
    position[d] = worst % labels.shape()[d];
    worst /= labels.shape()[d];
  }
  throw_error<InvalidArgumentError>("sparse_softmax_cross_entropy",
                                    "label {} at position {} is outside [0, {})", value,
                                    shape_to_string(position), classes);
}

// The range check guards the kernels' reads (x[label]): a captured step records it as a call of
// its own, so that every replay checks its labels and throws the eager error before any kernel
// reads them.
void check_labels(const DTensor& labels, int64_t classes) {
  if (StepObserver* hook = StepObserver::active()) {
    hook->effect("label_check", {&labels}, [classes](const StepObserver::Inputs& in) {
      check_labels_in_range(*in[0], classes);
    });
    return;
  }
  check_labels_in_range(labels, classes);
}

DTensor sparse_softmax_cross_entropy_forward(const DTensor& logits, const DTensor& labels) {
  check_same_mesh("sparse_softmax_cross_entropy", {&logits, &labels});
  if (logits.rank() < 1 ||
      labels.shape() != Shape(logits.shape().begin(), logits.shape().end() - 1)) {
    throw_error<ShapeError>("sparse_softmax_cross_entropy",
                            "labels {} must have the shape of logits {} without the class dim",
                            labels.short_string(), logits.short_string());
  }
  if (labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) {
    throw_error<DTypeError>("sparse_softmax_cross_entropy", "labels {} must be i32 or i64",
                            labels.short_string());
  }
  const int64_t axis = logits.rank() - 1;
  check_labels(labels, logits.shape()[axis]);
  check_floating("sparse_softmax_cross_entropy", logits);
  if (axis_sharded(logits, axis)) {
    // Class dim sharded: log(sum) - (x[label] - shift), the kernel's form. The label logit is
    // taken relative to the shift (exact for large logits, where lse - x[label] would cancel),
    // and selected rather than multiplied by a one-hot (0 * -inf would be NaN).
    SoftmaxPieces p = softmax_pieces(logits, axis);
    DTensor mask = one_hot(labels, logits.shape()[axis], DType::kBool);
    DTensor zero = fill({}, Layout::replicated(logits.mesh(), 0), 0.0, logits.dtype());
    DTensor picked = reduce_sum(where(mask, p.shifted, zero), {axis}, false);
    return sub(log(reshape(p.sum, labels.shape())), picked);
  }
  std::vector<int> label_letters = iota_letters(logits.rank() - 1);
  OpSignature sig{"sparse_softmax_cross_entropy",
                  {},
                  {{iota_letters(logits.rank()), false}, {label_letters, false}},
                  label_letters};
  return expand(sig, {&logits, &labels}, labels.shape(), logits.dtype(),
                4.0 * static_cast<double>(logits.num_elements()),
                [](const Shards& s) { return kernels::sparse_softmax_cross_entropy(s[0], s[1]); });
}

// (softmax(logits) - one_hot(labels)) * g, the VJP.
DTensor sparse_softmax_cross_entropy_grad(const DTensor& logits, const DTensor& labels,
                                          const DTensor& g) {
  const int64_t axis = logits.rank() - 1;
  if (!axis_sharded(logits, axis)) {
    // The fused local kernel.
    std::vector<int> letters = iota_letters(logits.rank() - 1);
    OpSignature sig{"sparse_softmax_cross_entropy_grad",
                    {},
                    {{iota_letters(logits.rank()), false}, {letters, false}, {letters, false}},
                    iota_letters(logits.rank())};
    return expand(sig, {&logits, &labels, &g}, logits.shape(), logits.dtype(),
                  4.0 * static_cast<double>(logits.num_elements()), [](const Shards& s) {
                    return kernels::sparse_softmax_cross_entropy_grad(s[0], s[1], s[2]);
                  });
  }
  DTensor p = softmax(logits, axis);
  DTensor diff = sub(p, one_hot(labels, logits.shape()[axis], logits.dtype()));
  return mul(diff, reshape(g, reduced_shape(logits.shape(), {axis}, true)));
}

}  // namespace

DTensor sparse_softmax_cross_entropy(const DTensor& logits, const DTensor& labels) {
  return recorded(
      {&logits}, [&] { return sparse_softmax_cross_entropy_forward(logits, labels); },
      [&](const DTensor&) {
        return [logits, labels](const DTensor& g) -> Grads {
          return {sparse_softmax_cross_entropy_grad(logits, labels, g)};
        };
      });
}

}  // namespace dtensor
