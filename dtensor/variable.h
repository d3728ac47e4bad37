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
#include <optional>
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

  // If `value` is a live variable's current value (read from value() since its last update), the
  // variable's copy of it in `dtype` (same layout): made on the first call, kept until the value
  // changes, shared by later calls. Null otherwise. A mixed-precision policy reads a weight's
  // bf16 copy here instead of casting the weight on every step; a captured step records the read
  // and a replay reads the copy the variable holds then (cast anew when it has none). Copies of
  // replicated shards share storage as the value's shards do.
  static std::optional<DTensor> copy_of(const DTensor& value, DType dtype);

  // As update_in_place, for an update that also rewrites the variable's copy (copy_of) in the
  // same pass: `update(shards, copy)` gets the copy's shards when the variable has a copy held
  // by no one else (empty otherwise), and must then write every element of the copy from the
  // updated values (the copy's element i is the value's element i converted). update_in_place
  // and the assigns drop the copy instead.
  bool update_in_place_with_copy(
      const std::function<bool(const std::vector<Tensor>& shards, const std::vector<Tensor>& copy)>&
          update);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dtensor
