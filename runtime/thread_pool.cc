#include "runtime/thread_pool.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <string>
#include <system_error>

#include "runtime/cpu_relax.h"
#include "runtime/error.h"

namespace dtensor {

namespace {

// Idle workers and waiting callers spin this many times (a few microseconds) before sleeping:
// loops posted back to back then start without a kernel wake-up.
constexpr int kSpinIterations = 2000;

// The pools whose tasks the current thread is running, innermost first, linked through the
// stack frames that run them.
struct TaskScope {
  explicit TaskScope(const ThreadPool* pool);
  ~TaskScope();
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

  const ThreadPool* pool;
  TaskScope* outer;
};

thread_local TaskScope* current_scope = nullptr;

TaskScope::TaskScope(const ThreadPool* p) : pool(p), outer(current_scope) { current_scope = this; }
TaskScope::~TaskScope() { current_scope = outer; }

int threads_from_env(int fallback) {
  const char* text = std::getenv("DTENSOR_NUM_THREADS");
  if (text == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < 1 || value > 65536) {
    throw_error<InvalidArgumentError>(
        "ThreadPool::global", "DTENSOR_NUM_THREADS must be a positive integer, got '{}'", text);
  }
  return static_cast<int>(value);
}

}  // namespace

struct ThreadPool::Job {
  Job(int64_t size, const std::function<void(int64_t)>& f) : n(size), fn(f) {}

  const int64_t n;
  const std::function<void(int64_t)>& fn;
  std::atomic<int64_t> next{0};  // the next unclaimed index
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // written once, by the thread that set `failed`
  // Workers inside run_indices(). Changed only under mu_; read without it while spinning.
  std::atomic<int> helpers{0};
  std::condition_variable helpers_done;
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  if (num_threads < 1) {
    throw_error<InvalidArgumentError>("ThreadPool", "num_threads must be >= 1, got {}",
                                      num_threads);
  }
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  try {
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  // Never destroyed: workers stay parked until exit, and static destructors may still use it.
  static ThreadPool* pool = new ThreadPool(
      threads_from_env(std::max(1, static_cast<int>(std::thread::hardware_concurrency()))));
  return *pool;
}

bool ThreadPool::in_worker() { return current_scope != nullptr; }

bool ThreadPool::on_task_stack() const {
  for (const TaskScope* s = current_scope; s != nullptr; s = s->outer) {
    if (s->pool == this) return true;
  }
  return false;
}

void ThreadPool::run_indices(Job& job) {
  TaskScope scope(this);
  while (!job.failed.load(std::memory_order_relaxed)) {
    const int64_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.n) break;
    try {
      job.fn(i);
    } catch (...) {
      if (!job.failed.exchange(true)) job.error = std::current_exception();
    }
  }
}

ThreadPool::Job* ThreadPool::find_job_locked() const {
  for (Job* job : jobs_) {
    if (job->next.load(std::memory_order_relaxed) < job->n &&
        !job->failed.load(std::memory_order_relaxed)) {
      return job;
    }
  }
  return nullptr;
}

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (Job* job = find_job_locked()) {
      ++job->helpers;
      lock.unlock();
      run_indices(*job);
      lock.lock();
      // Notified under the lock: the caller cannot return and destroy the job before we let go.
      if (--job->helpers == 0) job->helpers_done.notify_one();
      continue;
    }
    if (stop_) return;
    const uint64_t seen = post_epoch_.load(std::memory_order_relaxed);
    lock.unlock();
    for (int spin = 0; spin < kSpinIterations; ++spin) {
      if (post_epoch_.load(std::memory_order_relaxed) != seen) break;
      cpu_relax();
    }
    lock.lock();
    work_cv_.wait(lock, [this] { return stop_ || find_job_locked() != nullptr; });
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty() || on_task_stack()) {
    // Inline: exceptions propagate directly and the remaining indices are skipped.
    TaskScope scope(this);
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }

  Job job(n, fn);
  const int64_t wanted = std::min<int64_t>(n - 1, static_cast<int64_t>(workers_.size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(&job);
  }
  post_epoch_.fetch_add(1, std::memory_order_relaxed);
  if (wanted == static_cast<int64_t>(workers_.size())) {
    work_cv_.notify_all();
  } else {
    for (int64_t i = 0; i < wanted; ++i) work_cv_.notify_one();
  }

  run_indices(job);

  std::unique_lock<std::mutex> lock(mu_);
  jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));  // no new helpers from here on
  if (job.helpers > 0) {
    // Helpers are finishing their last index: give them a moment before sleeping.
    lock.unlock();
    for (int spin = 0; spin < kSpinIterations && job.helpers.load(std::memory_order_relaxed) > 0;
         ++spin) {
      cpu_relax();
    }
    lock.lock();
    job.helpers_done.wait(lock, [&job] { return job.helpers == 0; });
  }
  lock.unlock();
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace dtensor
