// Checkpoints of a parameter-server job: the partitioned variables, whole, with their optimizer
// slots and step, in train/checkpoint's format (CheckpointManager's directory/ckpt-<step>).
//
// A checkpoint holds each variable under its own name and the optimizer as
// Checkpoint::add_optimizer("optimizer", ...) would save it (slots "optimizer/<variable>/<slot>",
// its step), with no trace of how the variables were partitioned. So it restores into any
// partitioning and any number of servers, and into a synchronous model whose variables have the
// same names (track them with add_variable(name, var) and the optimizer as "optimizer"); a
// checkpoint saved that way restores into a parameter-server job.
//
// Both functions run on the coordinator, between scheduled functions (join first: a function
// running meanwhile may update some shards before the read and some after).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/ps/strategy.h"

namespace dtensor::ps {

// Reads every variable, slot and the step from the servers and saves directory/ckpt-<step>,
// keeping the newest `max_to_keep`. Returns the path.
std::string save_checkpoint(const ParameterServerStrategy& strategy, const std::string& directory,
                            int64_t step, int64_t max_to_keep = 3);
// Restores the newest complete checkpoint in `directory` onto the servers (the strategy's
// variables must be created, with the checkpoint's names and shapes) and returns its step;
// nullopt when there is none. Errors as Checkpoint::restore's.
std::optional<int64_t> restore_latest(const ParameterServerStrategy& strategy,
                                      const std::string& directory);

}  // namespace dtensor::ps
