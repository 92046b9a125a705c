// The HTTP server's connection threads, started on demand (connection_pool.h).
#include "connection_pool.h"

#include <exception>
#include <iterator>
#include <utility>

namespace flashnorm::serve {

ConnectionPool::ConnectionPool(size_t max_threads, Notice on_first_refusal, Spawn spawn,
                               std::chrono::milliseconds idle_timeout)
    : max_threads_(max_threads == 0 ? 1 : max_threads),
      idle_timeout_(idle_timeout),
      notice_(std::move(on_first_refusal)),
      spawn_(std::move(spawn)) {
  if (!spawn_) spawn_ = [](std::function<void()> body) { return std::thread(std::move(body)); };
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::list<std::thread> reaped;  // threads that exited after idle_timeout, joined below
  bool inline_run = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reaped.splice(reaped.end(), finished_);
    inline_run = shutdown_;  // after shutdown no thread takes it: run it here, never drop it
    bool queued = false;
    if (!inline_run) {
      try {
        jobs_.push_back(std::move(fn));
        queued = true;
        // a thread per waiting job: start one unless enough are idle or the cap is reached
        if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
          threads_.emplace_back();  // its slot first: the worker gets its position in the list
          const auto self = std::prev(threads_.end());
          try {
            *self = spawn_([this, self] { worker(self); });  // it waits for mu_, held here
            ++started_;
          } catch (...) {
            threads_.erase(self);
            throw;
          }
        }
      } catch (...) {  // no thread (std::system_error), no memory, anything: a refusal
        if (refused_++ == 0 && notice_) {
          try {
            notice_(threads_.size());
          } catch (...) {
          }
        }
        // not queued (no memory), or queued with nothing to ever run it: serve it on this thread
        if (!queued) {
          inline_run = true;
        } else if (threads_.empty()) {
          fn = std::move(jobs_.back());
          jobs_.pop_back();
          inline_run = true;
        }
      }
    }
  }
  for (std::thread& t : reaped) t.join();  // they exited on their own (or are releasing mu_)
  if (inline_run) {
    fn();
  } else {
    cv_.notify_one();
  }
}

void ConnectionPool::worker(std::list<std::thread>::iterator self) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    const bool woken =
        cv_.wait_for(lock, idle_timeout_, [this] { return shutdown_ || !jobs_.empty(); });
    --idle_;
    if (!woken) {  // idle too long: hand this thread's handle over to be joined, then exit
      finished_.splice(finished_.end(), threads_, self);
      return;
    }
    if (jobs_.empty()) return;  // shut down with nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // its captures (the connection) released before the lock
    lock.lock();
  }
}

void ConnectionPool::shutdown() {
  std::list<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
    threads.splice(threads.end(), threads_);
    threads.splice(threads.end(), finished_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t ConnectionPool::threads_started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

size_t ConnectionPool::threads_running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();  // shutdown() moved them out
}

size_t ConnectionPool::threads_idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_;
}

size_t ConnectionPool::threads_refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

}  // namespace flashnorm::serve
