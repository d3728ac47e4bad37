// Checkpoint: tracking and save. Restore is in restore.cc, the manager in manager.cc.
#include "train/checkpoint/checkpoint.h"

#include <exception>
#include <map>
#include <set>

#include "dtensor/step_observer.h"
#include "train/checkpoint/internal/file_io.h"
#include "train/checkpoint/internal/in_trace.h"
#include "train/checkpoint/internal/index.h"
#include "train/checkpoint/internal/shard_io.h"
#include "train/checkpoint/internal/sync.h"

namespace dtensor {

using namespace checkpoint_internal;

void Checkpoint::check_new_name(const std::string& function, const std::string& kind,
                                const std::string& name, bool taken) const {
  if (name.empty()) throw_error<InvalidArgumentError>(function, "{} names must not be empty", kind);
  if (taken) throw_error<InvalidArgumentError>(function, "{} '{}' is already tracked", kind, name);
}

void Checkpoint::add_variable(const std::string& name, const DVariable& var) {
  bool taken = false;
  for (const auto& [n, v] : variables_) taken |= n == name;
  check_new_name("Checkpoint::add_variable", "variable", name, taken);
  variables_.emplace_back(name, var);
}

void Checkpoint::add_variables(const std::string& prefix, const std::vector<DVariable>& vars) {
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string own = vars[i].name().empty() ? std::to_string(i) : vars[i].name();
    const std::string name = prefix.empty() ? own : prefix + "/" + own;
    bool taken = false;
    for (const auto& [n, v] : variables_) taken |= n == name;
    check_new_name("Checkpoint::add_variables", "variable", name, taken);
    variables_.emplace_back(name, vars[i]);
  }
}

void Checkpoint::add_optimizer(const std::string& name, Optimizer& optimizer) {
  bool taken = false;
  for (const OptimizerEntry& o : optimizers_) taken |= o.name == name;
  check_new_name("Checkpoint::add_optimizer", "optimizer", name, taken);
  optimizers_.push_back({name, &optimizer, std::nullopt});
}

void Checkpoint::add_optimizer(const std::string& name, Optimizer& optimizer,
                               const std::vector<DVariable>& vars) {
  add_optimizer(name, optimizer);
  optimizers_.back().vars = vars;
}

void Checkpoint::add_dataset(const std::string& name, data::Dataset& dataset) {
  bool taken = false;
  for (const auto& [n, d] : datasets_) taken |= n == name;
  check_new_name("Checkpoint::add_dataset", "dataset", name, taken);
  datasets_.emplace_back(name, &dataset);
}

void Checkpoint::add_int(const std::string& name, int64_t* value) {
  if (value == nullptr) {
    throw_error<InvalidArgumentError>("Checkpoint::add_int", "integer '{}' is a null pointer",
                                      name);
  }
  bool taken = false;
  for (const auto& [n, v] : ints_) taken |= n == name;
  check_new_name("Checkpoint::add_int", "integer", name, taken);
  ints_.emplace_back(name, value);
}

std::vector<Checkpoint::TrackedTensor> Checkpoint::tracked_tensors(
    const std::string& function) const {
  std::vector<TrackedTensor> out;
  std::map<std::string, std::string> owner;  // name -> what uses it, for the collision message
  auto add = [&](const std::string& name, const DVariable& var, const std::string& optimizer) {
    const std::string what = optimizer.empty() ? fmt::format("variable '{}'", name)
                                               : fmt::format("a slot of optimizer '{}'", optimizer);
    auto [it, inserted] = owner.emplace(name, what);
    if (!inserted) {
      throw_error<InvalidArgumentError>(function, "name '{}' is used by {} and by {}", name,
                                        it->second, what);
    }
    out.push_back({name, var, optimizer});
  };
  for (const auto& [name, var] : variables_) add(name, var, "");
  for (const OptimizerEntry& o : optimizers_) {
    for (const auto& [slot, var] : o.optimizer->slots()) add(o.name + "/" + slot, var, o.name);
  }
  return out;
}

std::optional<Mesh> Checkpoint::process_mesh(const std::string& function) const {
  std::optional<Mesh> mesh;
  std::string first;
  auto consider = [&](const Mesh& m, const std::string& what) {
    if (!mesh) {
      mesh = m;
      first = what;
    } else if (m.num_processes() != mesh->num_processes() ||
               m.process_index() != mesh->process_index()) {
      throw_error<InvalidArgumentError>(
          function,
          "{} is on a mesh of {} processes (this is process {}), {} on one of {} (process {}): "
          "everything a checkpoint tracks must span the same processes",
          what, m.num_processes(), m.process_index(), first, mesh->num_processes(),
          mesh->process_index());
    }
  };
  for (const auto& [name, var] : variables_)
    consider(var.layout().mesh(), "variable '" + name + "'");
  for (const OptimizerEntry& o : optimizers_) {
    for (const auto& [slot, var] : o.optimizer->slots()) {
      consider(var.layout().mesh(), "slot '" + slot + "' of optimizer '" + o.name + "'");
    }
    if (o.vars) {
      for (const DVariable& var : *o.vars) {
        consider(var.layout().mesh(),
                 "variable '" + var.name() + "' of optimizer '" + o.name + "'");
      }
    }
  }
  for (const auto& [name, dataset] : datasets_) consider(dataset->mesh(), "dataset '" + name + "'");
  return mesh;
}

namespace {

// Ends one step of a collective save or restore: every process learns whether all succeeded. A
// process that failed rethrows its own error; the others report that one did.
void finish_step(const std::optional<Mesh>& mesh, const std::exception_ptr& failure,
                 const std::string& cleanup, const std::string& function, const std::string& what,
                 const std::string& path) {
  if (all_succeeded(mesh, failure == nullptr)) return;
  if (!cleanup.empty()) {
    try {
      remove_all(cleanup, function);
    } catch (const Error&) {
      // Best effort: a leftover staging directory is ignored and removed by later saves.
    }
  }
  if (failure) std::rethrow_exception(failure);
  throw_error<IoError>(function, "another process failed to {} {}; see its error", what, path);
}

// Saving replaces `path` only if it is absent, an empty directory or a checkpoint: never data
// that merely shares the name.
void check_replaceable(const std::string& path, const std::string& function) {
  if (!exists(path)) return;
  if (is_directory(path) &&
      (exists(join_path(path, kIndexFile)) || list_directory(path, function).empty())) {
    return;
  }
  throw_error<InvalidArgumentError>(function, "{} exists and is not a checkpoint; not replacing it",
                                    path);
}

std::string part_name(int64_t process, int64_t num_processes) {
  return fmt::format("shards-{:05d}-of-{:05d}", process, num_processes);
}

}  // namespace

void Checkpoint::save(const std::string& path_in) const {
  const std::string fn = "Checkpoint::save";
  reject_in_trace("Checkpoint::save", kSaveInTraceReason);
  const std::string path = strip_trailing_slashes(path_in);
  if (path.empty()) throw_error<InvalidArgumentError>(fn, "the checkpoint path is empty");
  const std::vector<TrackedTensor> tensors = tracked_tensors(fn);
  const std::optional<Mesh> mesh = process_mesh(fn);
  const int64_t process = mesh ? mesh->process_index() : 0;
  const int64_t num_processes = mesh ? mesh->num_processes() : 1;
  std::vector<DTensor> values;  // one consistent snapshot per variable
  for (const TrackedTensor& t : tensors) values.push_back(t.var.value());

  const std::string save_id = make_save_id(mesh);
  const std::string staging = path + ".tmp-" + save_id;
  const std::string own_part = part_name(process, num_processes);

  // 1. Every process writes the unique shards of its devices and its part of the index.
  std::exception_ptr failure;
  try {
    if (process == 0) check_replaceable(path, fn);
    make_directories(staging, fn);
    std::vector<ShardToWrite> shards;
    for (size_t i = 0; i < tensors.size(); ++i) {
      for (ShardToWrite& s : shards_to_write(tensors[i].name, values[i])) {
        shards.push_back(std::move(s));
      }
    }
    const std::map<std::string, std::string> metadata = {
        {"format", kFormatName},
        {"save_id", save_id},
        {"process", std::to_string(process)},
        {"num_processes", std::to_string(num_processes)}};
    ProcessPart part =
        write_shard_file(staging, own_part + ".safetensors", process, shards, metadata, fn);
    write_file_synced(join_path(staging, own_part + ".json"), encode_part(part), fn);
  } catch (...) {
    failure = std::current_exception();
  }
  finish_step(mesh, failure, process == 0 ? staging : "", fn, "write its shards for", path);

  // 2. Process 0 merges the parts into the index and commits by renaming the directory.
  bool committed = false;
  if (process == 0) {
    try {
      Index index;
      index.save_id = save_id;
      index.num_processes = num_processes;
      index.checksum_block_bytes = kChecksumBlockBytes;
      std::map<std::string, std::vector<ShardRecord>> shards;
      for (int64_t p = 0; p < num_processes; ++p) {
        const std::string name = part_name(p, num_processes);
        const std::string part_path = join_path(staging, name + ".json");
        ProcessPart part = decode_part(read_file(part_path, fn), part_path, fn);
        if (part.process != p || part.file.name != name + ".safetensors") {
          throw_error<IoError>(fn, "{} describes process {}'s file {}", part_path, part.process,
                               part.file.name);
        }
        index.files.push_back(part.file);
        for (auto& [entry, records] : part.shards) {
          for (ShardRecord& r : records) {
            r.file = p;
            shards[entry].push_back(std::move(r));
          }
        }
      }
      for (size_t i = 0; i < tensors.size(); ++i) {
        VariableRecord record;
        record.dtype = values[i].dtype();
        record.shape = values[i].shape();
        record.layout = values[i].layout().to_string();
        auto it = shards.find(tensors[i].name);
        if (it != shards.end()) record.shards = std::move(it->second);
        check_tiling(tensors[i].name, record, staging, fn);
        index.variables.emplace(tensors[i].name, std::move(record));
      }
      for (const OptimizerEntry& o : optimizers_) {
        OptimizerRecord& record = index.optimizers[o.name];
        record.step = o.optimizer->step();
        for (const TrackedTensor& t : tensors) {
          if (t.optimizer == o.name) record.slots.push_back(t.name);
        }
      }
      for (const auto& [name, dataset] : datasets_) {
        data::Dataset::State state = dataset->state();
        index.datasets[name] = {state.epoch, state.batch};
      }
      for (const auto& [name, value] : ints_) index.ints[name] = *value;

      write_file_synced(join_path(staging, kIndexFile), encode_index(index), fn);
      sync_directory(staging, fn);
      const bool replaced = replace_directory(staging, path, fn);
      committed = true;
      sync_directory(parent_directory(path), fn);
      if (replaced) {
        try {
          remove_all(staging, fn);  // the previous checkpoint, swapped out
        } catch (const Error&) {
          // Left for CheckpointManager's clean-up: "*.tmp-*" is never taken for a checkpoint.
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
  }
  finish_step(mesh, failure, process == 0 && !committed ? staging : "", fn, "commit", path);
}

}  // namespace dtensor
