// The global pool's environment variables: bad values are rejected with the variable and the
// value, and nothing is created until they are fixed; ranks sharing the cores spin briefly. Its own
// binary, so that no other test has created the global pool first.
#include <stdlib.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <thread>

#include "runtime/error.h"
#include "runtime/thread_pool.h"

using namespace dtensor;

TEST_CASE("the global pool rejects bad DTENSOR_NUM_THREADS and DTENSOR_POOL_SPIN_US values") {
  for (const char* bad : {"-5", "12x", "", "1000001"}) {
    INFO("DTENSOR_POOL_SPIN_US='" << bad << "'");
    setenv("DTENSOR_POOL_SPIN_US", bad, 1);
    CHECK_THROWS_MATCHES(ThreadPool::global(), InvalidArgumentError,
                         Catch::Message("[ThreadPool::global] DTENSOR_POOL_SPIN_US must be an "
                                        "integer from 0 to 1000000, got '" +
                                        std::string(bad) + "'"));
  }
  setenv("DTENSOR_POOL_SPIN_US", "0", 1);
  setenv("DTENSOR_NUM_THREADS", "0", 1);
  CHECK_THROWS_MATCHES(
      ThreadPool::global(), InvalidArgumentError,
      Catch::Message(
          "[ThreadPool::global] DTENSOR_NUM_THREADS must be a positive integer, got '0'"));
  // Two ranks of an Open MPI launch on this host, each wanting every core: the workers spin
  // only briefly, so as not to take the cores from the other rank.
  unsetenv("DTENSOR_POOL_SPIN_US");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  setenv("DTENSOR_NUM_THREADS", std::to_string(cores).c_str(), 1);
  ThreadPool& pool = ThreadPool::global();
  CHECK(pool.num_threads() == cores);
  CHECK(pool.idle_spin() == ThreadPool::kSharedCoresIdleSpin);
  int ran = 0;
  pool.parallel_for(1, [&](int64_t) { ++ran; });
  CHECK(ran == 1);
}
