// ConnectionPool (serve/connection_pool.h): connections served concurrently on threads started on
// demand up to the cap; idle threads reused, and exiting after the idle time-out; a refused thread
// start neither crashes nor loses a connection (it waits for a running thread, or runs on the
// caller's thread when none is running); shutdown runs what is queued. The jobs here stand for
// connections: each blocks at a gate until the test opens it. Every test declares its Gate before
// the pool and an Opener after it, so that a failed assertion opens the gate before the pool's
// destructor joins its threads (a failure ends the test instead of hanging it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "serve/connection_pool.h"

namespace fs = flashnorm::serve;

namespace {

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
  int count_inside() {
    std::lock_guard<std::mutex> lock(mu);
    return inside;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// Opens the gate when it goes out of scope (declared after the pool: before its destructor).
struct Opener {
  Gate& g;
  ~Opener() { g.release(); }
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

// Polls cond() for up to 10 s.
template <class Cond>
bool eventually(Cond cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST(ConnectionPool, ServesConnectionsConcurrentlyUpToTheCap) {
  Gate g;
  fs::ConnectionPool pool(3);
  Opener opener{g};
  for (int i = 0; i < 5; ++i) pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.inside >= 3; })) << "3 connections should run at once";
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(g.count_inside(), 3) << "more connections at once than the cap of threads";
  EXPECT_EQ(pool.threads_started(), 3u);
  g.release();
  ASSERT_TRUE(g.wait_for([&] { return g.done == 5; })) << "queued connections were not served";
  EXPECT_EQ(pool.threads_refused(), 0u);
}

TEST(ConnectionPool, StartsThreadsOnlyAsConnectionsArrive) {
  Gate g;
  g.release();
  fs::ConnectionPool pool(1000);
  Opener opener{g};
  EXPECT_EQ(pool.threads_started(), 0u);
  for (int i = 0; i < 20; ++i) {
    pool.enqueue(g.job());
    ASSERT_TRUE(g.wait_for([&] { return g.done == i + 1; }));
    ASSERT_EQ(pool.threads_started(), 1u) << "a thread started for connection " << i;
    // the thread back to waiting (it may still be on its way when the job has returned)
    ASSERT_TRUE(eventually([&] { return pool.threads_idle() == 1; }));
  }
  // one connection at a time: the idle thread is reused, not a new one started per connection
  EXPECT_EQ(pool.threads_started(), 1u);
}

TEST(ConnectionPool, IdleThreadsExitAndNewOnesStartLater) {
  Gate g;
  g.release();
  fs::ConnectionPool pool(8, {}, {}, std::chrono::milliseconds(20));
  Opener opener{g};
  pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.done == 1; }));
  ASSERT_TRUE(eventually([&] { return pool.threads_running() == 0; }))
      << "an idle thread did not exit after the idle time-out";
  pool.enqueue(g.job());  // also joins the exited thread
  ASSERT_TRUE(g.wait_for([&] { return g.done == 2; }));
  EXPECT_EQ(pool.threads_started(), 2u);
}

// Threads timing out while connections arrive (a 1 ms idle time-out, arrivals 0-2 ms apart): every
// connection is served once, none waits forever in the queue.
TEST(ConnectionPool, ConnectionsArrivingAsThreadsTimeOutAreAllServed) {
  std::atomic<int> ran{0};
  {
    fs::ConnectionPool pool(64, {}, {}, std::chrono::milliseconds(1));
    uint32_t x = 12345;
    for (int i = 0; i < 2000; ++i) {
      pool.enqueue([&] { ++ran; });
      x = x * 1664525u + 1013904223u;
      std::this_thread::sleep_for(std::chrono::microseconds((x >> 8) % 2000));
    }
    ASSERT_TRUE(eventually([&] { return ran.load() == 2000; }))
        << ran.load() << " of 2000 connections served";
  }
  EXPECT_EQ(ran.load(), 2000) << "a connection ran twice";
}

// A spawn that throws something that is not a std::exception, after threads have exited on their
// time-out (joinable handles waiting to be joined): a refusal like any other, no std::terminate.
TEST(ConnectionPool, AnyFailureToStartAThreadIsARefusal) {
  Gate g;
  g.release();
  auto left = std::make_shared<std::atomic<int>>(1);
  fs::ConnectionPool pool(
      8, {},
      [left](std::function<void()> body) {
        if (left->fetch_sub(1) <= 0) throw 42;
        return std::thread(std::move(body));
      },
      std::chrono::milliseconds(5));
  Opener opener{g};
  pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.done == 1; }));
  ASSERT_TRUE(eventually([&] { return pool.threads_running() == 0; }));
  pool.enqueue(g.job());  // no thread starts: served here, the exited one joined
  EXPECT_EQ(g.done, 2);
  EXPECT_EQ(pool.threads_refused(), 1u);
}

TEST(ConnectionPool, RefusedThreadsMakeConnectionsWaitNotFail) {
  Gate g;
  size_t noticed = 99, notices = 0;
  fs::ConnectionPool pool(
      8,
      [&](size_t running) {
        noticed = running;
        ++notices;
      },
      refusing_after(2));
  Opener opener{g};
  for (int i = 0; i < 5; ++i) pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.inside >= 2; }));
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
  size_t noticed = 99;
  fs::ConnectionPool pool(
      8, [&](size_t running) { noticed = running; }, refusing_after(0));
  Opener opener{g};
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  pool.enqueue([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(noticed, 0u);
  pool.enqueue(g.job());
  EXPECT_EQ(g.done, 1);
  EXPECT_EQ(pool.threads_started(), 0u);
  EXPECT_EQ(pool.threads_refused(), 2u);
}

TEST(ConnectionPool, ShutdownRunsQueuedConnectionsThenJoins) {
  std::atomic<int> ran{0};
  Gate g;
  fs::ConnectionPool pool(1);
  Opener opener{g};
  pool.enqueue(g.job());
  ASSERT_TRUE(g.wait_for([&] { return g.inside >= 1; }));
  for (int i = 0; i < 4; ++i) pool.enqueue([&] { ++ran; });
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g.release();
  });
  pool.shutdown();  // returns only after the queued four ran
  late.join();
  EXPECT_EQ(ran.load(), 4);
  pool.enqueue([&] { ++ran; });  // after shutdown: run on the caller's thread
  EXPECT_EQ(ran.load(), 5);
}
