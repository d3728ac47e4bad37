#include "train/keras/layer.h"

#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "fmt/format.h"
#include "ops/autograd.h"
#include "runtime/error.h"

namespace dtensor::keras {

namespace {

// A new value with x's shards, whose VJP brings the gradient to x's layout (not partial): the
// reduction a style implies at its input (Colwise's backward all-reduce, Megatron's f) when the
// forward moves nothing there. Recorded as a call in a captured step.
DTensor gradient_boundary(const DTensor& x) {
  auto alias = [](const DTensor& t) {
    return DTensor::from_trusted_shards(t.shape(), t.dtype(), t.layout(), t.shards());
  };
  StepObserver* recorder = StepObserver::active();
  DTensor y =
      recorder == nullptr
          ? alias(x)
          : recorder->call("parallel_style_input", {&x},
                           [alias](const StepObserver::Inputs& in) { return alias(*in[0]); });
  if (tape_active()) {
    record_op({&x}, y, [layout = x.layout().without_partial()](const DTensor& g) {
      return std::vector<std::optional<DTensor>>{relayout(g, layout)};
    });
  }
  return y;
}

}  // namespace

std::string Layer::describe() const {
  std::vector<std::string> vars;
  for (const DVariable& v : variables()) {
    std::string leaf = v.name().substr(v.name().rfind('/') + 1);
    vars.push_back(leaf + " " + v.value().short_string());
  }
  if (vars.empty()) return fmt::format("{} '{}'", kind(), name_);
  return fmt::format("{} '{}' ({})", kind(), name_, fmt::join(vars, ", "));
}

std::string Layer::unfit(const ParallelStyle&) const { return "it takes no parallel style"; }

void Layer::check_style(const ParallelStyle& style, const Mesh& mesh, const char* function) const {
  const std::string s = style.to_string();
  if (std::string why = unfit(style); !why.empty()) {
    throw_error<InvalidArgumentError>(function, "{} on {}: {}", s, describe(), why);
  }
  if (!built()) throw_error<InvalidArgumentError>(function, "{} on {}: not built", s, describe());
  if (!mesh.has_dim(style.mesh_dim())) {
    throw_error<InvalidArgumentError>(function, "{} on {}: mesh {} has no dim '{}'", s, describe(),
                                      mesh.dims_string(), style.mesh_dim());
  }
  const std::optional<Placement>& in = style.options().input_layouts;
  if (in && in->kind() == Placement::Kind::kPartial) {
    throw_error<InvalidArgumentError>(function, "{} on {}: no layer computes on a partial sum", s,
                                      describe());
  }
  if (style.output().kind() == Placement::Kind::kPartial &&
      style.kind() != ParallelStyle::Kind::kRowwise) {
    throw_error<InvalidArgumentError>(
        function, "{} on {}: only RowwiseParallel leaves a partial sum", s, describe());
  }
  for (const DVariable& v : variables()) {
    if (!(v.layout().mesh() == mesh)) {
      throw_error<MeshError>(function, "{} on {}: variable '{}' lives on mesh {}, not on {}", s,
                             describe(), v.name(), v.layout().mesh().dims_string(),
                             mesh.dims_string());
    }
  }
}

std::vector<Layout> Layer::variable_layouts(const ParallelStyle& style) const {
  std::vector<Layout> out;
  for (const DVariable& v : variables()) {
    out.push_back(with_placement(v.layout(), style.mesh_dim(), Replicate(), "Layer", name_));
  }
  return out;
}

void Layer::apply_style(const ParallelStyle& style, const Mesh& mesh) {
  check_style(style, mesh, "Layer::apply_style");
  const std::vector<DVariable> old = variables();
  const std::vector<Layout> layouts = variable_layouts(style);
  std::vector<DVariable> placed;
  for (size_t i = 0; i < old.size(); ++i) {
    const DTensor value = old[i].value();
    placed.emplace_back(value.layout() == layouts[i] ? value : relayout(value, layouts[i]),
                        old[i].name());
  }
  set_variables(placed);
  style_ = style;
}

DTensor Layer::input(const DTensor& x, const char* function) const {
  if (!style_) return x;
  const std::string& dim = style_->mesh_dim();
  const std::string what = fmt::format("layer '{}' ({})", name_, style_->to_string());
  if (const std::optional<Placement>& declared = style_->options().input_layouts) {
    const Placement want = declared->resolved(x.rank(), function, what + ": input_layouts");
    if (placement_of(x.layout(), dim) != want) {
      throw_error<LayoutError>(function, "{} takes its input as {} along '{}', got {}", what,
                               want.to_string(), dim, x.short_string());
    }
  }
  const Placement compute = compute_input(*style_).resolved(x.rank(), function, what + ": input");
  const Layout target =
      with_placement(x.layout(), dim, compute, function, what + ": input " + x.short_string());
  if (target == x.layout()) return gradient_boundary(x);
  return relayout(x, target);
}

DTensor Layer::output(const DTensor& y, const char* function) const {
  if (!style_) return y;
  const std::string what = fmt::format("layer '{}' ({})", name_, style_->to_string());
  const Placement out = style_->output().resolved(y.rank(), function, what + ": output_layouts");
  return relayout(y, with_placement(y.layout(), style_->mesh_dim(), out, function,
                                    what + ": output " + y.short_string()));
}

}  // namespace dtensor::keras
