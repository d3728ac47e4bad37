// CollectiveSummary: a step's collective budget, by kind, mesh dims and bytes.
//
//   Function step = function(...);
//   step(args);                                                 // traces
//   std::cout << step.collective_summary(args).to_string();     // what every replay moves
//
// or, around any code (eager, or a Trainer's train_step): a CollectiveListener
// (dtensor/collectives.h) and CollectiveSummary::of(listener.records()). Bytes are those of the
// local input shards of each call, as CollectiveStats counts them.
//
// A plain value; thread-safe for const use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/collectives.h"

namespace dtensor {

struct CollectiveSummary {
  struct Row {
    CollectiveKind kind;
    std::string dims;  // "model", "data,seq": the mesh dims the groups span
    int64_t calls = 0;
    int64_t bytes = 0;
  };
  std::vector<Row> rows;  // one per (kind, dims), in kind order, then by dims

  static CollectiveSummary of(const std::vector<CollectiveRecord>& records);

  // Calls and bytes of one (kind, dims), 0 when there are none.
  int64_t calls(CollectiveKind kind, const std::string& dims) const;
  int64_t bytes(CollectiveKind kind, const std::string& dims) const;
  int64_t total_calls() const;
  int64_t total_bytes() const;
  // One line per row: "all_reduce over model: 6 calls, 49152 bytes", then a total line.
  std::string to_string() const;
};

}  // namespace dtensor
