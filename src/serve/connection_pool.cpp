// The HTTP server's connection threads, started on demand (connection_pool.h).
#include "connection_pool.h"

#include <system_error>
#include <utility>

namespace flashnorm::serve {

ConnectionPool::ConnectionPool(size_t max_threads, Notice on_first_refusal, Spawn spawn)
    : max_threads_(max_threads == 0 ? 1 : max_threads),
      notice_(std::move(on_first_refusal)),
      spawn_(std::move(spawn)) {
  if (!spawn_) spawn_ = [](std::function<void()> body) { return std::thread(std::move(body)); };
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_) {  // no thread will take it: run it here rather than drop its connection
    lock.unlock();
    fn();
    return;
  }
  jobs_.push_back(std::move(fn));
  // a thread per waiting job: start one unless enough are idle or the cap is reached
  if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
    try {
      threads_.push_back(spawn_([this] { worker(); }));
      ++started_;
    } catch (const std::system_error&) {
      if (refused_++ == 0 && notice_) notice_(threads_.size());
      if (threads_.empty()) {  // nothing will ever run it: serve it on this thread
        std::function<void()> job = std::move(jobs_.back());
        jobs_.pop_back();
        lock.unlock();
        job();
        return;
      }
    }
  }
  lock.unlock();
  cv_.notify_one();
}

void ConnectionPool::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // shut down with nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t ConnectionPool::threads_started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

size_t ConnectionPool::threads_refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

size_t ConnectionPool::threads_idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_;
}

}  // namespace flashnorm::serve
