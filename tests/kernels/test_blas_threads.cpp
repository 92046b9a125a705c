// BlasThreads (src/kernels/cpu/blas_threads.cpp): OpenBLAS's thread count for a scope, restored by
// the last of overlapping scopes to the count from before the first. Skipped (reported) where the
// BLAS library is not OpenBLAS.
#include <gtest/gtest.h>

#include <optional>

#include "flashnorm/kernels/cpu/blas_threads.h"

extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

namespace flashnorm::kernels::cpu {
namespace {

// OpenBLAS with a settable thread count (a single-threaded build, e.g. Debian's
// libopenblas0-serial, keeps 1 whatever is set)
bool settable() {
  if (!BlasThreads::available()) return false;
  openblas_set_num_threads(3);
  return openblas_get_num_threads() == 3;
}

TEST(BlasThreads, OneScopeSetsAndRestores) {
  if (!settable()) GTEST_SKIP() << "not an OpenBLAS whose thread count can be set";
  {
    BlasThreads one(1);
    EXPECT_EQ(openblas_get_num_threads(), 1);
  }
  EXPECT_EQ(openblas_get_num_threads(), 3);
}

// Two engines' passes on two threads: A starts, B starts, A ends, B ends. Each scope restoring the
// count it found would leave 1 (B found A's); the count from before A is restored instead.
TEST(BlasThreads, OverlappingScopesRestoreTheCountBeforeTheFirst) {
  if (!settable()) GTEST_SKIP() << "not an OpenBLAS whose thread count can be set";
  std::optional<BlasThreads> a, b;
  a.emplace(1);
  b.emplace(1);
  a.reset();
  EXPECT_EQ(openblas_get_num_threads(), 1);  // B's scope is still alive
  b.reset();
  EXPECT_EQ(openblas_get_num_threads(), 3);
}

}  // namespace
}  // namespace flashnorm::kernels::cpu
