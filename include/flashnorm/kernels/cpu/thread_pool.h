// A fixed set of worker threads that runs the tasks 0..n-1 of one parallel loop at a time (the
// calling thread takes part), for the CPU engine's row-parallel quantized matmuls. Tasks are
// claimed one at a time (compare-exchange on the loop's generation and index) and the caller
// returns once every task has finished, whether or not every worker woke for the loop. Workers
// spin (pause), then yield, then wait on a condition variable between loops (decode issues a loop
// every few microseconds); the caller spins while the last tasks finish.
#pragma once

#include <functional>
#include <memory>

namespace flashnorm::kernels::cpu {

class ThreadPool {
 public:
  // `threads` >= 1 threads in all, the caller included (1: everything runs on the caller);
  // 0: std::thread::hardware_concurrency().
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Calls task(i) once for every i in [0, n), spread over the threads; returns when all are done.
  // The first exception a task throws is rethrown here (after the loop has drained).
  // Not reentrant: one loop at a time, from one calling thread.
  void run(int n, const std::function<void(int)>& task);
  // Tells the workers to sleep now instead of spinning for a next loop: call it before work that
  // other threads do (a multithreaded BLAS call), so that spinning workers do not take their
  // cores. The next run() wakes them. Safe at any time from the calling thread.
  void rest();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace flashnorm::kernels::cpu
