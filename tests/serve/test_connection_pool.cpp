// ConnectionPool (serve/connection_pool.h): connections served concurrently on threads started on
// demand up to the cap; a refused thread start neither crashes nor loses a connection (it waits
// for a running thread, or runs on the caller's thread when none has started); shutdown runs what
// is queued. The jobs here stand for connections: each blocks until the test releases it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "serve/connection_pool.h"

namespace fs = flashnorm::serve;

namespace {

// A gate the jobs wait at until the test opens it, counting the jobs inside.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int inside = 0, done = 0;

  std::function<void()> job() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu);
      ++inside;
      cv.notify_all();
      cv.wait(lock, [this] { return open; });
      ++done;
      cv.notify_all();
    };
  }
  // Waits up to 10 s until pred() holds (under the lock); false on time-out.
  template <class Pred>
  bool wait_for(Pred pred) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), pred);
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// A spawn that starts `allowed` threads, then refuses as a system out of threads does.
fs::ConnectionPool::Spawn refusing_after(int allowed) {
  auto left = std::make_shared<std::atomic<int>>(allowed);
  return [left](std::function<void()> body) {
    if (left->fetch_sub(1) <= 0)
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    return std::thread(std::move(body));
  };
}

}  // namespace

TEST(ConnectionPool, ServesConnectionsConcurrentlyUpToTheCap) {
  Gate g;
  fs::ConnectionPool pool(3);
  for (int i = 0; i < 5; ++i) pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.inside == 3; })) << "3 connections should run at once";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(g.inside, 3) << "more threads than the cap";
  EXPECT_EQ(pool.threads_started(), 3u);
  g.release();
  ASSERT_TRUE(g.wait_for([&] { return g.done == 5; })) << "queued connections were not served";
  pool.shutdown();
  EXPECT_EQ(pool.threads_refused(), 0u);
}

TEST(ConnectionPool, StartsThreadsOnlyAsConnectionsArrive) {
  Gate g;
  g.release();
  fs::ConnectionPool pool(1000);
  EXPECT_EQ(pool.threads_started(), 0u);
  for (int i = 0; i < 20; ++i) {
    pool.enqueue(g.job());
    ASSERT_TRUE(g.wait_for([&] { return g.done == i + 1; }));
    // the thread back to waiting (it may still be on its way when the job has returned)
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (pool.threads_idle() < 1 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // one connection at a time: the idle thread is reused, not a new one started per connection
  EXPECT_EQ(pool.threads_started(), 1u);
}

TEST(ConnectionPool, RefusedThreadsMakeConnectionsWaitNotFail) {
  Gate g;
  size_t noticed = 0, notices = 0;
  fs::ConnectionPool pool(
      8,
      [&](size_t running) {
        noticed = running;
        ++notices;
      },
      refusing_after(2));
  for (int i = 0; i < 5; ++i) pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.inside == 2; }));
  EXPECT_EQ(pool.threads_started(), 2u);
  EXPECT_EQ(pool.threads_refused(), 3u);
  EXPECT_EQ(notices, 1u) << "one notice, at the first refusal";
  EXPECT_EQ(noticed, 2u);
  g.release();
  ASSERT_TRUE(g.wait_for([&] { return g.done == 5; })) << "a connection was lost";
}

TEST(ConnectionPool, NoThreadAtAllServesOnTheCallersThread) {
  Gate g;
  g.release();
  fs::ConnectionPool pool(8, {}, refusing_after(0));
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  pool.enqueue([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller);
  pool.enqueue(g.job());
  EXPECT_EQ(g.done, 1);
  EXPECT_EQ(pool.threads_started(), 0u);
  EXPECT_EQ(pool.threads_refused(), 2u);
}

TEST(ConnectionPool, ShutdownRunsQueuedConnectionsThenJoins) {
  std::atomic<int> ran{0};
  {
    fs::ConnectionPool pool(1);
    Gate g;
    pool.enqueue(g.job());
    ASSERT_TRUE(g.wait_for([&] { return g.inside == 1; }));
    for (int i = 0; i < 4; ++i) pool.enqueue([&] { ++ran; });
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      g.release();
    });
    pool.shutdown();  // returns only after the queued four ran
    EXPECT_EQ(ran.load(), 4);
    opener.join();
    pool.enqueue([&] { ++ran; });  // after shutdown: run on the caller's thread
    EXPECT_EQ(ran.load(), 5);
  }
}
