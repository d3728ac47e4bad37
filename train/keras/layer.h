// Layer: a named Keras-style model part that parallelize (train/keras/parallelize.h) can find by
// its path and split by a parallel style (train/keras/parallel_style.h).
//
// A layer's path is its name under its parents' ("block0/fc1"); the root's own name is not part
// of it. A layer that calls others lists them in sublayers(). A layer that can be split says
// which styles fit it and places its variables for one; its call() brings its input to the
// style's layout (input()) and its output to the style's output layout (output()).
//
// A copy shares the variables (DVariables are handles) and the style the layer has when copied;
// placing one copy later replaces that copy's variables only. Not thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train/keras/model.h"
#include "train/keras/parallel_style.h"

namespace dtensor::keras {

class Layer : public Model {
 public:
  explicit Layer(std::string name = "") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // The class name, as errors print it: "Dense", "LayerNormalization".
  virtual const char* kind() const = 0;
  // The layers this one calls, for paths (pointers into this layer, valid while it lives).
  virtual std::vector<Layer*> sublayers() { return {}; }
  // Whether the variables exist yet (true for a layer without any).
  virtual bool built() const { return true; }
  // "Dense 'fc1' (kernel f32[8,16] [unsharded,unsharded], bias f32[16] [unsharded])", for errors.
  std::string describe() const;

  // InvalidArgumentError naming `function` when `style` does not fit this layer (its kind, or an
  // option it cannot honour) or the layer is not built, MeshError when a variable lives on
  // another mesh than `mesh`.
  void check_style(const ParallelStyle& style, const Mesh& mesh, const char* function) const;
  // Relayouts the variables for `style` (check_style first) and keeps it for call(). The
  // variables are replaced by variables of the same names and values in the new layouts: call it
  // before an optimizer has slots for them.
  void apply_style(const ParallelStyle& style, const Mesh& mesh);
  const std::optional<ParallelStyle>& style() const { return style_; }

 protected:
  // Why `style` does not fit this layer ("takes SequenceParallel only"), or "" when it does.
  // Every style is refused unless overridden.
  virtual std::string unfit(const ParallelStyle& style) const;
  // The variables' layouts under `style`, in the order of variables(); by default each one
  // replicated along the style's mesh dim.
  virtual std::vector<Layout> variable_layouts(const ParallelStyle& style) const;
  // What the layer computes on under `style` (the style's, unless overridden: an embedding reads
  // whole ids whatever its table's split).
  virtual Placement compute_input(const ParallelStyle& style) const {
    return style.compute_input();
  }
  // Replaces the variables (same order as variables()).
  virtual void set_variables(const std::vector<DVariable>& vars) {}

  // For call(): `x` relayouted to what the style computes on (checked against input_layouts),
  // and `y` to the style's output layout; both identities without a style. `function` names the
  // call in errors.
  DTensor input(const DTensor& x, const char* function) const;
  DTensor output(const DTensor& y, const char* function) const;

 private:
  std::string name_;
  std::optional<ParallelStyle> style_;
};

}  // namespace dtensor::keras
