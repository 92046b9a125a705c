// The HTTP server's connection threads (cpp-httplib's TaskQueue): one thread per connection being
// served, started when a connection arrives and no started thread is idle, up to max_threads; a
// thread idle for idle_timeout exits. httplib's own ThreadPool starts all its threads up front and
// keeps them: `serve` sized it for every admitted and queued request (2 (max_concurrent +
// max_queued) per model plus 8), so --max-queued 1048576 started 32451 threads at once before the
// system refused more (observed); a refused thread throws from its constructor inside httplib's
// listen with the others running, which ends in std::terminate. Here a refused thread is not an
// error: the connection waits for a running thread or, when none is running, is served on the
// listening thread itself (one connection at a time rather than none); `threads_refused()` counts
// them.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace flashnorm::serve {

class ConnectionPool : public httplib::TaskQueue {
 public:
  // Called (under the pool's lock: it must not call the pool) at the first refused thread start,
  // with the number of threads running then (0: this connection is served on the caller's thread).
  using Notice = std::function<void(size_t running)>;
  // Starts a thread running `body`, or throws (std::system_error, as std::thread does) without
  // having started one: once body may run it must not throw. Tests replace it to refuse threads.
  using Spawn = std::function<std::thread(std::function<void()> body)>;

  // max_threads >= 1 (0 is taken as 1); spawn defaults to std::thread's constructor.
  explicit ConnectionPool(size_t max_threads, Notice on_first_refusal = {}, Spawn spawn = {},
                          std::chrono::milliseconds idle_timeout = std::chrono::seconds(30));
  ~ConnectionPool() override;  // shutdown() if not called

  // Runs fn on an idle thread, a newly started one (below max_threads), or the next to become idle.
  void enqueue(std::function<void()> fn) override;
  // Runs every job already enqueued, then joins the threads. enqueue after it runs fn inline.
  void shutdown() override;

  size_t threads_started() const;  // threads started so far
  size_t threads_running() const;  // started threads not exited or exiting (0 after shutdown)
  size_t threads_idle() const;     // running threads waiting for a connection
  size_t threads_refused() const;  // thread starts the system refused

 private:
  void worker(std::list<std::thread>::iterator self);

  const size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  Notice notice_;
  Spawn spawn_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;   // running
  std::list<std::thread> finished_;  // exited after idle_timeout, not joined yet
  size_t idle_ = 0, started_ = 0, refused_ = 0;
  bool shutdown_ = false;
};

}  // namespace flashnorm::serve
