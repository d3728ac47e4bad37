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

using Clock = std::chrono::steady_clock;

// Spins until `done()` holds or `window` has passed, looking at the clock only every few pauses;
// returns done(). A window of zero looks once.
template <typename Done>
bool spin_until(const Done& done, std::chrono::microseconds window) {
  if (done()) return true;
  if (window.count() <= 0) return false;
  const Clock::time_point deadline = Clock::now() + window;
  while (true) {
    for (int i = 0; i < 16; ++i) {
      cpu_relax();
      if (done()) return true;
    }
    if (Clock::now() >= deadline) return done();
  }
}

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

// The integer in environment variable `name`, `fallback` when unset; throws when it is not an
// integer in [min, max].
long long_from_env(const char* name, long fallback, long min, long max, const char* expected) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < min || value > max) {
    throw_error<InvalidArgumentError>("ThreadPool::global", "{} must be {}, got '{}'", name,
                                      expected, text);
  }
  return value;
}

// How many processes the launcher (Open MPI, MPICH) started on this host; 1 outside a launch.
long local_processes() {
  const char* text = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (text == nullptr) text = std::getenv("MPI_LOCALNRANKS");
  const long n = text != nullptr ? std::strtol(text, nullptr, 10) : 1;
  return n >= 1 ? n : 1;
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

ThreadPool::ThreadPool(int num_threads, std::chrono::microseconds idle_spin)
    : num_threads_(num_threads), idle_spin_(idle_spin) {
  if (num_threads < 1) {
    throw_error<InvalidArgumentError>("ThreadPool", "num_threads must be >= 1, got {}",
                                      num_threads);
  }
  if (idle_spin.count() < 0) {
    throw_error<InvalidArgumentError>("ThreadPool", "idle_spin must be >= 0 us, got {} us",
                                      idle_spin.count());
  }
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  try {
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {
    stop_workers();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  post_epoch_.fetch_add(1, std::memory_order_relaxed);  // ends the spinning
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  // Never destroyed: workers stay parked until exit, and static destructors may still use it.
  static ThreadPool* pool = [] {
    const long cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const long threads =
        long_from_env("DTENSOR_NUM_THREADS", cores, 1, 65536, "a positive integer");
    // Ranks that share the cores would lose them to each other's spinning workers.
    const std::chrono::microseconds spin =
        threads * local_processes() > cores ? kSharedCoresIdleSpin : kDefaultIdleSpin;
    return new ThreadPool(static_cast<int>(threads), std::chrono::microseconds(long_from_env(
                                                         "DTENSOR_POOL_SPIN_US", spin.count(), 0,
                                                         1000000, "an integer from 0 to 1000000")));
  }();
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
    const bool posted =
        spin_until([&] { return post_epoch_.load(std::memory_order_relaxed) != seen; }, idle_spin_);
    lock.lock();
    if (posted) continue;
    ++sleeping_;
    work_cv_.wait(lock, [this] { return stop_ || find_job_locked() != nullptr; });
    --sleeping_;
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
  int64_t to_wake = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(&job);
    // A worker counts itself in sleeping_ and checks for jobs under mu_, so it either sees this
    // job or is counted here: no wake-up is lost, and none is sent to spinning workers.
    to_wake = std::min<int64_t>(wanted, sleeping_);
  }
  post_epoch_.fetch_add(1, std::memory_order_relaxed);
  if (to_wake == static_cast<int64_t>(workers_.size())) {
    work_cv_.notify_all();
  } else {
    for (int64_t i = 0; i < to_wake; ++i) work_cv_.notify_one();
  }

  run_indices(job);

  std::unique_lock<std::mutex> lock(mu_);
  jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));  // no new helpers from here on
  if (job.helpers > 0) {
    // Helpers are finishing their last index: give them a moment before sleeping.
    lock.unlock();
    spin_until([&job] { return job.helpers.load(std::memory_order_relaxed) == 0; }, idle_spin_);
    lock.lock();
    job.helpers_done.wait(lock, [&job] { return job.helpers == 0; });
  }
  lock.unlock();
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace dtensor
