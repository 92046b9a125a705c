#include "flashnorm/kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FN_CPU_RELAX() _mm_pause()
#else
#define FN_CPU_RELAX() std::this_thread::yield()
#endif

namespace flashnorm::kernels::cpu {

// One loop at a time. `cursor` packs the loop's generation (high 32 bits) and the next task index
// (low 32 bits); a worker claims index i of generation g only by a compare-exchange on (g, i), so
// a worker that wakes late never takes (or consumes) an index of a later loop. The caller waits
// for `done` == n (tasks finished), not for every worker to have woken: a worker the OS has not
// scheduled costs the loop nothing when the others have taken its tasks.
struct ThreadPool::State {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake;
  std::atomic<uint64_t> cursor{0};
  std::atomic<int> done{0};
  std::atomic<int> sleepers{0};
  const std::function<void(int)>* task = nullptr;
  // read by a worker before its claim, possibly while the caller sets the next loop's (that claim
  // then fails on the generation): atomic, so the read is not a data race
  std::atomic<int> n{0};
  std::atomic<bool> stop{false};
  // set by rest(): the workers stop spinning and sleep until the next loop
  std::atomic<bool> resting{false};
  std::mutex err_mu;
  std::exception_ptr error;

  static uint32_t gen_of(uint64_t c) { return static_cast<uint32_t>(c >> 32); }
  // The index of a closed generation: past any task count.
  static constexpr uint64_t kClosed = 0x7fffffffu;

  // Takes task indices of generation `g` until none is left.
  void drain(uint32_t g) {
    uint64_t c = cursor.load(std::memory_order_acquire);
    for (;;) {
      if (gen_of(c) != g) return;
      const int i = static_cast<int>(c & 0xffffffffu);
      if (i >= n.load(std::memory_order_seq_cst)) return;
      if (!cursor.compare_exchange_weak(c, c + 1, std::memory_order_seq_cst,
                                        std::memory_order_acquire)) {
        continue;
      }
      try {
        (*task)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_acq_rel);
      c = cursor.load(std::memory_order_acquire);
    }
  }

  void worker() {
    uint32_t seen = 0;
    for (;;) {
      // spin first (decode issues loops microseconds apart), then yield, then sleep
      uint32_t g = gen_of(cursor.load(std::memory_order_acquire));
      for (int spin = 0; g == seen && spin < 20000 && !resting.load(std::memory_order_relaxed);
           ++spin) {
        if (spin < 4000) {
          FN_CPU_RELAX();
        } else {
          std::this_thread::yield();
        }
        g = gen_of(cursor.load(std::memory_order_acquire));
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mu);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        wake.wait(lock, [&] {
          return stop.load() || gen_of(cursor.load(std::memory_order_seq_cst)) != seen;
        });
        sleepers.fetch_sub(1, std::memory_order_seq_cst);
        if (stop.load()) return;
        g = gen_of(cursor.load(std::memory_order_acquire));
      }
      if (stop.load(std::memory_order_relaxed)) return;
      seen = g;
      drain(g);
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
    s_->stop.store(true);
  }
  s_->wake.notify_all();
  for (auto& t : s_->workers) t.join();
}

void ThreadPool::rest() { s_->resting.store(true, std::memory_order_relaxed); }

int ThreadPool::size() const { return static_cast<int>(s_->workers.size()) + 1; }

void ThreadPool::run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  State& s = *s_;
  if (s.workers.empty() || n == 1) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  // Closes the last loop first: a worker that read the cursor at that loop's end and reads the new
  // task count below must not claim an index of the last generation (with a larger count it
  // would run a task of this loop early, count it done twice, and this call could return while
  // the task still runs); its compare-exchange fails on the closed value, whose index no count
  // reaches.
  const uint32_t last = State::gen_of(s.cursor.load(std::memory_order_relaxed));
  s.cursor.store((uint64_t(last) << 32) | State::kClosed, std::memory_order_seq_cst);
  s.task = &task;
  s.resting.store(false, std::memory_order_relaxed);
  s.n.store(n, std::memory_order_seq_cst);
  s.done.store(0, std::memory_order_relaxed);
  s.error = nullptr;
  const uint32_t g = last + 1;
  // publishes task, n and done (release) with the new generation at index 0
  s.cursor.store(uint64_t(g) << 32, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(s.mu);  // a worker between its check and its wait
    s.wake.notify_all();
  }
  s.drain(g);
  for (int spin = 0; s.done.load(std::memory_order_acquire) < n; ++spin) {
    if (spin < 4000) {
      FN_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace flashnorm::kernels::cpu
