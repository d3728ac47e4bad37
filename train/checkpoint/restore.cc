// Checkpoint::restore, load_variable and the completeness check.
#include <sys/stat.h>

#include <exception>
#include <set>

#include "dtensor/step_observer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/internal/file_io.h"
#include "train/checkpoint/internal/in_trace.h"
#include "train/checkpoint/internal/index.h"
#include "train/checkpoint/internal/shard_io.h"
#include "train/checkpoint/internal/sync.h"

namespace dtensor {

using namespace checkpoint_internal;

namespace {

Index load_index(const std::string& path, const std::string& function) {
  if (!is_directory(path)) {
    throw_error<IoError>(function, "no checkpoint at {}: {}", path,
                         exists(path) ? "not a directory" : "no such directory");
  }
  const std::string index_path = join_path(path, kIndexFile);
  if (!exists(index_path)) {
    throw_error<IoError>(function, "{} is not a complete checkpoint: it has no {}", path,
                         kIndexFile);
  }
  return decode_index(read_file(index_path, function), index_path, function);
}

// The record of `name`, checked against the variable it is restored into.
const VariableRecord& matching_record(const Index& index, const std::string& path,
                                      const std::string& name, const std::string& optimizer,
                                      const Shape& shape, DType dtype,
                                      const std::string& function) {
  auto it = index.variables.find(name);
  if (it == index.variables.end()) {
    if (optimizer.empty()) {
      throw_error<InvalidArgumentError>(function, "variable '{}' is not in {}", name, path);
    }
    throw_error<InvalidArgumentError>(function, "slot '{}' of optimizer '{}' is not in {}", name,
                                      optimizer, path);
  }
  const VariableRecord& record = it->second;
  const char* what = optimizer.empty() ? "variable" : "slot";
  if (record.shape != shape) {
    throw_error<ShapeError>(function, "{} '{}' in {} has shape {} but the tracked {} has {}", what,
                            name, path, shape_to_string(record.shape), what,
                            shape_to_string(shape));
  }
  if (record.dtype != dtype) {
    throw_error<DTypeError>(function, "{} '{}' in {} is {} but the tracked {} is {}", what, name,
                            path, dtype_name(record.dtype), what, dtype_name(dtype));
  }
  check_tiling(name, record, path, function);
  return record;
}

}  // namespace

void Checkpoint::restore(const std::string& path_in) {
  const std::string fn = "Checkpoint::restore";
  reject_in_trace("Checkpoint::restore", kRestoreInTraceReason);
  const std::string path = strip_trailing_slashes(path_in);
  const std::optional<Mesh> mesh = process_mesh(fn);

  // Phase 1: everything that can fail, into new buffers; no tracked object changes.
  Index index;
  std::vector<TrackedTensor> tensors;
  std::vector<ReadTarget> targets;
  std::vector<std::vector<size_t>> box_of_device;
  std::vector<data::Dataset::State> dataset_states;
  std::exception_ptr failure;
  try {
    index = load_index(path, fn);
    // Slots of a fresh optimizer exist only once built: for the given variables, or for the
    // tracked variables whose slots the checkpoint holds.
    for (const OptimizerEntry& o : optimizers_) {
      if (o.vars) {
        o.optimizer->build(*o.vars);
        continue;
      }
      auto saved = index.optimizers.find(o.name);
      if (saved == index.optimizers.end()) continue;
      std::vector<DVariable> owners;
      for (const auto& [name, var] : variables_) {
        const std::string prefix = o.name + "/" + var.name() + "/";
        for (const std::string& slot : saved->second.slots) {
          if (slot.compare(0, prefix.size(), prefix) == 0 &&
              slot.find('/', prefix.size()) == std::string::npos) {
            owners.push_back(var);
            break;
          }
        }
      }
      o.optimizer->build(owners);
    }
    tensors = tracked_tensors(fn);

    // Names, shapes and dtypes, in tracking order.
    std::set<std::string> used;
    for (const TrackedTensor& t : tensors) {
      const VariableRecord& record =
          matching_record(index, path, t.name, t.optimizer, t.var.shape(), t.var.dtype(), fn);
      used.insert(t.name);
      box_of_device.emplace_back();
      targets.push_back(make_read_target(t.name, record, t.var.layout(), &box_of_device.back()));
    }
    for (const OptimizerEntry& o : optimizers_) {
      if (!index.optimizers.count(o.name)) {
        throw_error<InvalidArgumentError>(fn, "optimizer '{}' is not in {}", o.name, path);
      }
    }
    for (const auto& [name, dataset] : datasets_) {
      auto it = index.datasets.find(name);
      if (it == index.datasets.end()) {
        throw_error<InvalidArgumentError>(fn, "dataset '{}' is not in {}", name, path);
      }
      const data::Dataset::State state{it->second.epoch, it->second.batch};
      const int64_t per_epoch = dataset->batches_per_epoch();
      if (state.epoch < 0 || state.batch < 0 || (state.batch > 0 && state.batch >= per_epoch)) {
        throw_error<InvalidArgumentError>(
            fn,
            "dataset '{}' in {} is at (epoch {}, batch {}), which the tracked dataset of {} "
            "batches per epoch cannot resume",
            name, path, state.epoch, state.batch, per_epoch);
      }
      dataset_states.push_back(state);
    }
    for (const auto& [name, value] : ints_) {
      if (!index.ints.count(name)) {
        throw_error<InvalidArgumentError>(fn, "integer '{}' is not in {}", name, path);
      }
    }
    if (strict_) {
      auto untracked = [&](const char* kind, const std::string& name) {
        throw_error<InvalidArgumentError>(
            fn, "{} holds {} '{}', which is not tracked (set_strict(false) restores a subset)",
            path, kind, name);
      };
      for (const auto& [name, o] : index.optimizers) {
        bool tracked = false;
        for (const OptimizerEntry& e : optimizers_) tracked |= e.name == name;
        if (!tracked) untracked("optimizer", name);
        for (const std::string& slot : o.slots) {
          if (!used.count(slot)) {
            throw_error<InvalidArgumentError>(
                fn,
                "{} holds slot '{}' of optimizer '{}', which the tracked optimizer does not "
                "have (pass the optimizer's variables to add_optimizer, or track them)",
                path, slot, name);
          }
        }
      }
      for (const auto& [name, v] : index.variables) {
        if (!used.count(name)) untracked("variable", name);
      }
      for (const auto& [name, d] : index.datasets) {
        bool tracked = false;
        for (const auto& [n, ds] : datasets_) tracked |= n == name;
        if (!tracked) untracked("dataset", name);
      }
      for (const auto& [name, value] : index.ints) {
        bool tracked = false;
        for (const auto& [n, v] : ints_) tracked |= n == name;
        if (!tracked) untracked("integer", name);
      }
    }

    read_targets(path, index, targets, fn);
  } catch (...) {
    failure = std::current_exception();
  }
  if (!all_succeeded(mesh, failure == nullptr)) {
    if (failure) std::rethrow_exception(failure);
    throw_error<IoError>(fn, "another process failed to restore {}; see its error", path);
  }

  // Phase 2: commit. Datasets first: Dataset::restore is the one step that could still refuse
  // (it re-checks what phase 1 checked), and the ones already moved are moved back if it does.
  std::vector<data::Dataset::State> previous;
  try {
    for (size_t i = 0; i < datasets_.size(); ++i) {
      previous.push_back(datasets_[i].second->state());
      datasets_[i].second->restore(dataset_states[i]);
    }
  } catch (...) {
    for (size_t i = 0; i + 1 < previous.size(); ++i) datasets_[i].second->restore(previous[i]);
    throw;
  }
  for (const auto& [name, value] : ints_) *value = index.ints.at(name);
  for (const OptimizerEntry& o : optimizers_)
    o.optimizer->set_step(index.optimizers.at(o.name).step);
  for (size_t i = 0; i < tensors.size(); ++i) {
    DVariable var = tensors[i].var;
    var.assign(assemble(targets[i], var.layout(), box_of_device[i]));
  }
}

DTensor load_variable(const std::string& path_in, const std::string& name, const Layout& layout) {
  const std::string fn = "load_variable";
  const std::string path = strip_trailing_slashes(path_in);
  Index index = load_index(path, fn);
  auto it = index.variables.find(name);
  if (it == index.variables.end()) {
    throw_error<InvalidArgumentError>(fn, "variable '{}' is not in {}", name, path);
  }
  const VariableRecord& record = it->second;
  if (layout.rank() != static_cast<int64_t>(record.shape.size())) {
    throw_error<ShapeError>(fn, "variable '{}' in {} has shape {}, layout {} has rank {}", name,
                            path, shape_to_string(record.shape), layout.short_string(),
                            layout.rank());
  }
  if (layout.is_partial()) {
    throw_error<LayoutError>(fn, "cannot load variable '{}' into partial layout {}", name,
                             layout.short_string());
  }
  check_tiling(name, record, path, fn);
  std::vector<size_t> box_of_device;
  std::vector<ReadTarget> targets;
  targets.push_back(make_read_target(name, record, layout, &box_of_device));
  read_targets(path, index, targets, fn);
  return assemble(targets[0], layout, box_of_device);
}

bool is_complete_checkpoint(const std::string& path_in) {
  const std::string path = strip_trailing_slashes(path_in);
  try {
    Index index = load_index(path, "is_complete_checkpoint");
    for (const FileRecord& f : index.files) {
      struct stat st;
      const std::string file = join_path(path, f.name);
      if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<uint64_t>(st.st_size) != f.size) {
        return false;
      }
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace dtensor
