#include "train/data/internal/prefetcher.h"

#include <utility>

namespace dtensor::data::internal {

Prefetcher::Prefetcher(BatchAssembler assembler, int64_t num_examples, Config config,
                       Dataset::State start, int64_t depth)
    : depth_(depth),
      thread_(&Prefetcher::run, this, std::move(assembler), num_examples, std::move(config),
              start) {}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

std::optional<Batch> Prefetcher::pop() {
  Item item;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  changed_.notify_all();
  if (item.error) std::rethrow_exception(item.error);
  return std::move(item.batch);
}

void Prefetcher::push(Item item) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(item));
  }
  changed_.notify_all();
}

void Prefetcher::run(BatchAssembler assembler, int64_t num_examples, Config config,
                     Dataset::State position) {
  for (;;) {
    {
      // Wait for room before assembling: at most depth_ batches exist ahead of the consumer.
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < depth_; });
      if (stop_) return;
    }
    if (!normalize(position, num_examples, config)) {
      push(Item{});  // the end
      return;
    }
    Item item;
    try {
      item.batch = assembler.build(position.epoch, position.batch);
    } catch (...) {
      item.error = std::current_exception();
      push(std::move(item));
      return;
    }
    push(std::move(item));
    ++position.batch;
  }
}

}  // namespace dtensor::data::internal
