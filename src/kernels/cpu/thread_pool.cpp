#include "flashnorm/kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flashnorm::kernels::cpu {

struct ThreadPool::State {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake, done;
  std::atomic<uint64_t> generation{0};  // one per loop
  const std::function<void(int)>* task = nullptr;
  int n = 0;
  std::atomic<int> next{0};
  int running = 0;  // workers still inside the current loop
  bool stop = false;
  std::exception_ptr error;

  // Takes task indices until none is left.
  void drain() {
    for (int i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      try {
        (*task)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  }

  void worker() {
    uint64_t seen = 0;
    for (;;) {
      // a short spin first: decode issues loops tens of microseconds apart
      for (int spin = 0; spin < 4000 && generation.load(std::memory_order_acquire) == seen;
           ++spin) {
        std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait(lock, [&] { return stop || generation.load() != seen; });
        if (stop) return;
        seen = generation.load();
      }
      drain();
      std::lock_guard<std::mutex> lock(mu);
      if (--running == 0) done.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int threads) : s_(std::make_unique<State>()) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < threads; ++i) s_->workers.emplace_back([this] { s_->worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
  }
  s_->wake.notify_all();
  for (auto& t : s_->workers) t.join();
}

int ThreadPool::size() const { return static_cast<int>(s_->workers.size()) + 1; }

void ThreadPool::run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  State& s = *s_;
  if (s.workers.empty() || n == 1) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.task = &task;
    s.n = n;
    s.next.store(0);
    s.running = static_cast<int>(s.workers.size());
    s.error = nullptr;
    s.generation.fetch_add(1, std::memory_order_release);
  }
  s.wake.notify_all();
  s.drain();
  std::unique_lock<std::mutex> lock(s.mu);
  s.done.wait(lock, [&] { return s.running == 0; });
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace flashnorm::kernels::cpu
