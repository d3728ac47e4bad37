// Internal to Dataset: assembles batches ahead on one background thread.
//
// The thread builds batches from `start` on, in order, into a queue of at most `depth` batches,
// and ends after the last batch, after an exception (handed to the consumer), or when stopped.
// pop() is for one consumer thread; the destructor stops and joins the thread from any state:
// waiting for room in the queue, or mid-assembly (it then waits for that batch to finish).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "train/data/internal/batch_assembler.h"

namespace dtensor::data::internal {

class Prefetcher {
 public:
  Prefetcher(BatchAssembler assembler, int64_t num_examples, Config config, Dataset::State start,
             int64_t depth);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in order, nullopt after the last one; rethrows the producer's exception. After
  // nullopt or an exception the producer has ended: pop() must not be called again.
  std::optional<Batch> pop();

 private:
  struct Item {
    std::optional<Batch> batch;  // nullopt: the end (or an error)
    std::exception_ptr error;
  };
  void run(BatchAssembler assembler, int64_t num_examples, Config config, Dataset::State start);
  void push(Item item);

  const int64_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;  // an item was pushed or popped, or stop was asked
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace dtensor::data::internal
