// BlasThreads (kernels/cpu/blas_threads.h): OpenBLAS's openblas_{get,set}_num_threads, declared
// weak so that another BLAS library links without them; the scopes counted under one mutex so
// that overlapping ones (two engines' passes on two threads) restore the count from before the
// first of them, not a count another scope set.
#include "flashnorm/kernels/cpu/blas_threads.h"

#include <mutex>

extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

namespace flashnorm::kernels::cpu {
namespace {
std::mutex g_mu;
int g_active = 0;    // scopes alive
int g_original = 0;  // the count before the first of them
}  // namespace

bool BlasThreads::available() { return openblas_set_num_threads && openblas_get_num_threads; }

BlasThreads::BlasThreads(int n) {
  if (!available()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_active++ == 0) g_original = openblas_get_num_threads();
  openblas_set_num_threads(n);
  held_ = true;
}

BlasThreads::~BlasThreads() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (--g_active == 0 && g_original > 0) openblas_set_num_threads(g_original);
}

}  // namespace flashnorm::kernels::cpu
