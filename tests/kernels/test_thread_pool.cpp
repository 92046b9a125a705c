// kernels/cpu/thread_pool.h under churn: loops of different task counts back to back (as the
// matmuls issue them), each task recording its index; after every run() each index of that loop
// ran exactly once and no task is still running. The race run() closes (a worker claiming an
// index of a finished loop once the next loop's larger count is visible) needs a preemption inside
// run() and was not seen here with or without the fix: this checks the contract under churn.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "flashnorm/kernels/cpu/thread_pool.h"

namespace {

namespace fc = flashnorm::kernels::cpu;

TEST(ThreadPool, EveryTaskOnceAndFinishedWhenRunReturns) {
  fc::ThreadPool pool(3);
  std::vector<std::atomic<int>> ran(64);
  std::atomic<int> running{0};
  const int counts[] = {2, 7, 1, 64, 3, 16, 5};
  int bad_count = 0, still_running = 0;
  for (int loop = 0; loop < 20000; ++loop) {
    const int n = counts[loop % 7];
    for (int i = 0; i < n; ++i) ran[i].store(0);
    pool.run(n, [&](int i) {
      running.fetch_add(1);
      ran[i].fetch_add(1);
      for (volatile int spin = 0; spin < (i % 3) * 50; ++spin) {
      }
      running.fetch_sub(1);
    });
    still_running += running.load() != 0;
    for (int i = 0; i < n; ++i) bad_count += ran[i].load() != 1;
    // let a worker finish what it may still run, so the next loop's counts start clean
    while (running.load() != 0) {
    }
  }
  EXPECT_EQ(still_running, 0) << "run() returned while a task still ran";
  EXPECT_EQ(bad_count, 0) << "a task ran twice or not at all";
}

}  // namespace
