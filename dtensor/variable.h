// DVariable: a mutable DTensor with an identity and a fixed layout (TF's d_variable.DVariable).
//
// A DVariable is a handle: copies refer to the same variable (same id(), same value). Its layout
// is fixed at creation and may not be partial. `assign` and friends accept a value in any layout
// of the same mesh and *relayout it* to the variable's layout (so a partial gradient is reduced
// on the way in); a value of another shape, dtype or mesh is rejected with an error naming the
// variable. Updates are copy-on-write: a DTensor read from value() earlier keeps its contents.
//
// Every value the variable holds, initial or assigned, carries one DTensor id of its own (not the
// id of the DTensor passed in): a gradient tape that watches the variable tracks all its reads,
// before and after an assign.
//
// Thread-safety: all methods may be called concurrently; each update is atomic with respect to
// the others.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dtensor/dtensor.h"

namespace dtensor {

class DVariable {
 public:
  explicit DVariable(const DTensor& initial, std::string name = "");

  int64_t id() const;
  const std::string& name() const;
  DTensor value() const;
  const Layout& layout() const;
  const Shape& shape() const;
  DType dtype() const;

  void assign(const DTensor& value);
  void assign_add(const DTensor& delta);
  void assign_sub(const DTensor& delta);

  // Writes the value's buffers in place, atomically like assign: under the variable's lock, when
  // nothing but the variable holds its shards' buffers (no DTensor read from value() is alive,
  // no other tensor shares them), calls `update` with the shards and returns what it returns;
  // otherwise returns false without calling it. `update` writes elements only (same shapes, no
  // new handles) and must not call this variable's methods. For optimizer applies in replayed
  // steps (train/optim), which must not copy-on-write every step.
  bool update_in_place(const std::function<bool(const std::vector<Tensor>& shards)>& update);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dtensor
