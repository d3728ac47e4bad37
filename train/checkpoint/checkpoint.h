// Sharded checkpoints: save what a training run needs to resume (variables, optimizer slots and
// step, dataset position, counters) and restore it into any mesh and layout.
//
// A Checkpoint tracks named objects and holds references to them: tracked objects must outlive
// it. save(path) writes a checkpoint directory; restore(path) loads one into the tracked objects,
// whatever the meshes, layouts and process counts of the saving and of the restoring run.
//
// Format (a directory; internal/index.h and internal/safetensors.h give the details):
//   index.json                               what is saved and where (process 0 writes it last)
//   shards-<p>-of-<P>.safetensors            the shards process p wrote (safetensors container)
//   shards-<p>-of-<P>.json                   process p's part of the index (merged into index.json)
// Each distinct shard of a variable (devices that differ only along mesh dims its layout does not
// shard hold the same one) is written once, by the lowest device id holding it, in the file of the
// process that owns that device. Every file carries CRC-32C checksums (per file, and per 1 MiB
// block of each shard) in the index, which restore verifies on every byte it reads.
//
// Saving is atomic: the files go to "<path>.tmp-<id>", are fsynced, and the directory is renamed
// to `path` (atomically swapped with an existing checkpoint there) and its parent fsynced. A crash
// leaves either the old checkpoint or the new one at `path`, never a half-written one; leftovers
// are "*.tmp-*" directories, which CheckpointManager ignores and removes. An existing `path` that
// is neither a checkpoint nor an empty directory is never replaced (InvalidArgumentError).
//
// Restoring is all-or-nothing: the index, the files' sizes, headers and checksums, and every name,
// shape and dtype are checked, and every value is read into new buffers, before any tracked
// object changes. Each process reads only the byte ranges of saved shards that overlap the shards
// of its own devices, and builds each local shard directly (replicas share one buffer).
//
// Meshes of any device type: a shard on a GPU (or the emulated GPU) is staged through host memory
// with the device-neutral copies of dtensor/host_copy.h (host_readable to save, on_device to
// restore: one copy per GPU device, replicas included); nothing here reads shard memory on the
// device. A checkpoint saved on GPUs restores into CPU meshes and the other way round.
//
// Names: variables (and optimizer slots, named "<optimizer>/<slot name>", e.g.
// "adam/dense/kernel/m") share one namespace; optimizers, datasets and integers each have their
// own. Restore is strict by default: everything tracked must be in the checkpoint, and every
// entry of the checkpoint must be tracked (set_strict(false) ignores untracked entries, to restore
// a subset such as the weights alone).
//
// Multi-process: save, restore and CheckpointManager::save are collective over the processes of
// the tracked variables' mesh (all tracked meshes must span the same processes): every process
// calls them with the same path, and the path must be on a file system all of them see.
//
// Errors: IoError for unreadable, corrupt, truncated or incomplete checkpoints; ShapeError and
// DTypeError for a saved variable that does not match the tracked one; InvalidArgumentError for a
// missing or untracked entry or a bad name. Messages start with "[Checkpoint::restore]" (or the
// function at fault) and name the checkpoint path, the entry and the shapes or dtypes.
//
// Captured steps (train/capture/function.h): save, restore and CheckpointManager::save are host
// effects a replay would not repeat, so inside a traced step they throw UnimplementedError
// "[Checkpoint::save] cannot run inside a captured step: ..." like the other host effects; save
// between steps.
//
// Thread-safety: a Checkpoint or CheckpointManager is used from one thread at a time, and no
// tracked object may change during save or restore.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/variable.h"
#include "train/data/dataset.h"
#include "train/optim/optimizers.h"

namespace dtensor {

class Checkpoint {
 public:
  Checkpoint() = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;

  // Tracking. Names must be non-empty and unique within their kind (InvalidArgumentError naming
  // the add_* function otherwise).
  void add_variable(const std::string& name, const DVariable& var);
  // Each variable as "<prefix>/<var.name()>", or "<prefix>/<position>" for an unnamed one (no
  // prefix: the bare name).
  void add_variables(const std::string& prefix, const std::vector<DVariable>& vars);
  // The optimizer's step and every slot it has at save time. Restore first creates the slots of
  // the variables they belong to (Optimizer::build): for the tracked variables (add_variable(s))
  // whose slots the checkpoint holds, so that a fresh optimizer gets its moments back.
  void add_optimizer(const std::string& name, Optimizer& optimizer);
  // As above, with the optimizer's variables given: restore builds the slots of exactly these.
  void add_optimizer(const std::string& name, Optimizer& optimizer,
                     const std::vector<DVariable>& vars);
  // The dataset's position (Dataset::State); restore needs the dataset configured (batch()).
  void add_dataset(const std::string& name, data::Dataset& dataset);
  // An integer such as the epoch or an RNG counter.
  void add_int(const std::string& name, int64_t* value);

  // Strict (the default): restore rejects checkpoint entries that nothing tracked matches.
  void set_strict(bool strict) { strict_ = strict; }
  bool strict() const { return strict_; }

  // Writes a complete checkpoint at `path` (a directory; a checkpoint already there is replaced
  // atomically). Collective over the processes of the variables' mesh.
  void save(const std::string& path) const;
  // Restores everything tracked from `path` into the current meshes and layouts, all-or-nothing.
  // Collective likewise. Creating missing optimizer slots (zeros, as a first apply would) is the
  // only effect a failed restore may have.
  void restore(const std::string& path);

 private:
  struct OptimizerEntry {
    std::string name;
    Optimizer* optimizer = nullptr;
    std::optional<std::vector<DVariable>> vars;
  };
  // A variable or an optimizer slot, as the checkpoint names it.
  struct TrackedTensor {
    std::string name;
    DVariable var;
    std::string optimizer;  // for a slot: the optimizer's name
  };
  void check_new_name(const std::string& function, const std::string& kind, const std::string& name,
                      bool taken) const;
  // Variables, then every optimizer's slots; InvalidArgumentError if two share a name.
  std::vector<TrackedTensor> tracked_tensors(const std::string& function) const;
  // The mesh whose processes a save or restore spans (nullopt: nothing tracked lives on a mesh).
  std::optional<Mesh> process_mesh(const std::string& function) const;

  std::vector<std::pair<std::string, DVariable>> variables_;
  std::vector<OptimizerEntry> optimizers_;
  std::vector<std::pair<std::string, data::Dataset*>> datasets_;
  std::vector<std::pair<std::string, int64_t*>> ints_;
  bool strict_ = true;

  friend class CheckpointManager;  // for process_mesh
};

// Keeps the last `max_to_keep` checkpoints of a training run in `directory`, as
// directory/ckpt-<step>. Steps order the checkpoints: "latest" is the highest step.
class CheckpointManager {
 public:
  // Creates `directory` if needed. InvalidArgumentError unless max_to_keep >= 1.
  CheckpointManager(Checkpoint& checkpoint, std::string directory, int64_t max_to_keep);

  // Saves directory/ckpt-<step> (replacing one of that step), then deletes the lowest steps
  // beyond max_to_keep and the "ckpt-*.tmp-*" leftovers of interrupted saves (process 0 does the
  // deleting; other entries of the directory are left alone). Returns the path. Collective.
  std::string save(int64_t step);
  // The complete checkpoint of the highest step, never a partial one: a ckpt-<step> directory
  // whose index.json is intact and whose files all exist with the recorded sizes.
  std::optional<std::string> latest() const;
  // Restores latest() if there is one and returns its step. Collective.
  std::optional<int64_t> restore_latest();
  // The complete checkpoints, lowest step first.
  std::vector<std::string> checkpoints() const;

  const std::string& directory() const { return directory_; }
  int64_t max_to_keep() const { return max_to_keep_; }

 private:
  std::vector<std::pair<int64_t, std::string>> complete() const;

  Checkpoint& checkpoint_;
  std::string directory_;
  int64_t max_to_keep_;
};

// True if `path` is a complete checkpoint: an intact index.json and every file it lists present
// with its recorded size (contents are checked by restore). Never throws.
bool is_complete_checkpoint(const std::string& path);

// The step of a path named ".../ckpt-<step>", or nullopt.
std::optional<int64_t> checkpoint_step(const std::string& path);

// Reads one saved variable (or slot) of the checkpoint at `path` in `layout` (any mesh and
// layout with the saved shape; not partial), verifying checksums: for inspection and for loading
// weights into something other than a tracked DVariable. Not collective: each process reads what
// its own devices need. IoError, InvalidArgumentError, ShapeError as for restore.
DTensor load_variable(const std::string& path, const std::string& name, const Layout& layout);

}  // namespace dtensor
