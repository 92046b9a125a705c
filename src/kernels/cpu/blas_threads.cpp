// BlasThreads (kernels/cpu/blas_threads.h): OpenBLAS's openblas_{get,set}_num_threads, declared
// weak so that another BLAS library links without them.
#include "flashnorm/kernels/cpu/blas_threads.h"

extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

namespace flashnorm::kernels::cpu {

bool BlasThreads::available() { return openblas_set_num_threads && openblas_get_num_threads; }

BlasThreads::BlasThreads(int n) {
  if (!available()) return;
  old_ = openblas_get_num_threads();
  openblas_set_num_threads(n);
}

BlasThreads::~BlasThreads() {
  if (old_ > 0) openblas_set_num_threads(old_);
}

}  // namespace flashnorm::kernels::cpu
