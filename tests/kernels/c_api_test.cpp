// Tests of the C ABI (include/flashnorm/kernels/cuda/c_api.h, src/kernels/cuda/c_api.cpp): every
// entry point refuses NULL and out-of-range arguments with a code and a one-line message; context
// creation fails cleanly without a GPU; the symbols are exported unmangled (what ctypes looks up).
#include "flashnorm/kernels/cuda/c_api.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

bool has_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

TEST(CApi, SymbolsAreExportedUnmangled) {
  for (const char* name : {"fn_context_create", "fn_context_destroy", "fn_linear", "fn_tune_linear",
                           "fn_choose", "fn_workspace_generation", "fn_last_error"})
    EXPECT_NE(dlsym(RTLD_DEFAULT, name), nullptr) << name;
  // ... and nothing of the C++ library behind them (LinearContext's constructor, validate_linear)
  for (const char* name :
       {"_ZN9flashnorm7kernels4cuda13LinearContextC1Ev",
        "_ZN9flashnorm7kernels4cuda15validate_linearERKNS1_10LinearArgsENS1_10LinearImplE"})
    EXPECT_EQ(dlsym(RTLD_DEFAULT, name), nullptr) << name;
}

TEST(CApi, NullArgumentsAreRefused) {
  EXPECT_EQ(fn_context_create(nullptr), FN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fn_last_error()).find("out is NULL"), std::string::npos);
  int dummy = 0;
  EXPECT_EQ(fn_linear(nullptr, FN_BF16, 1, 8, 8, &dummy, 8, &dummy, 8, &dummy, 8, 1e-6f, FN_AUTO,
                      nullptr),
            FN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fn_last_error()).find("ctx is NULL"), std::string::npos);
  double g = 0, d = 0, p = 0;
  EXPECT_EQ(fn_tune_linear(nullptr, FN_BF16, 1, 8, 8, nullptr, nullptr, nullptr, 1, 1e-6f, nullptr,
                           &g, &d, &p),
            FN_INVALID_ARGUMENT);
  EXPECT_EQ(g, -1.0);  // outputs are defined even on error
  EXPECT_EQ(d, -1.0);
  EXPECT_EQ(p, -1.0);
  EXPECT_EQ(fn_choose(nullptr, 1, 8, 8, &dummy), FN_INVALID_ARGUMENT);
  uint64_t gen = 0;
  EXPECT_EQ(fn_workspace_generation(nullptr, &gen), FN_INVALID_ARGUMENT);
  fn_context_destroy(nullptr);  // ignored
}

TEST(CApi, ContextCreationWithoutGpuFailsWithMessage) {
  fn_context* ctx = reinterpret_cast<fn_context*>(&ctx);  // must be overwritten
  const int rc = fn_context_create(&ctx);
  if (has_gpu()) {
    ASSERT_EQ(rc, FN_OK) << fn_last_error();
    ASSERT_NE(ctx, nullptr);
    EXPECT_STREQ(fn_last_error(), "");
    fn_context_destroy(ctx);
    GTEST_SKIP() << "a GPU is present: the failure path is not reachable here";
  }
  EXPECT_EQ(rc, FN_CUDA_ERROR);
  EXPECT_EQ(ctx, nullptr);
  const std::string msg = fn_last_error();
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// With a GPU: bad dtype / impl / shapes / host pointers come back as FN_INVALID_ARGUMENT with the
// C++ API's messages, and choose works before any tuning.
TEST(CApi, ArgumentErrorsWithContext) {
  if (!has_gpu()) GTEST_SKIP() << "no GPU";
  fn_context* ctx = nullptr;
  ASSERT_EQ(fn_context_create(&ctx), FN_OK) << fn_last_error();
  int host[64] = {};
  EXPECT_EQ(fn_linear(ctx, 7, 1, 8, 8, host, 8, host, 8, host, 8, 1e-6f, FN_AUTO, nullptr),
            FN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fn_last_error()).find("dtype"), std::string::npos);
  EXPECT_EQ(fn_linear(ctx, FN_BF16, 1, 8, 8, host, 8, host, 8, host, 8, 1e-6f, 9, nullptr),
            FN_INVALID_ARGUMENT);
  EXPECT_EQ(fn_linear(ctx, FN_BF16, 1, 8, 12, host, 16, host, 16, host, 8, 1e-6f, FN_AUTO, nullptr),
            FN_INVALID_ARGUMENT);  // K % 8
  EXPECT_NE(std::string(fn_last_error()).find("K=12"), std::string::npos) << fn_last_error();
  EXPECT_EQ(fn_linear(ctx, FN_BF16, 1, 8, 8, host, 8, host, 8, host, 8, 1e-6f, FN_AUTO, nullptr),
            FN_INVALID_ARGUMENT);  // host pointers
  int impl = -1;
  EXPECT_EQ(fn_choose(ctx, 0, 2048, 2048, &impl), FN_INVALID_ARGUMENT);
  EXPECT_EQ(fn_choose(ctx, 4096, 2048, 2048, &impl), FN_OK);
  EXPECT_EQ(impl, FN_PREFILL);
  EXPECT_EQ(fn_choose(ctx, 1, 2048, 2048, &impl), FN_OK);
  EXPECT_EQ(impl, FN_DECODE);
  const void* xs[1] = {host};
  void* ys[1] = {host};
  EXPECT_EQ(fn_tune_linear(ctx, FN_BF16, 1, 8, 8, xs, xs, ys, 1, 1e-6f, nullptr, nullptr, nullptr,
                           nullptr),
            FN_INVALID_ARGUMENT);  // the legacy stream cannot be captured
  EXPECT_NE(std::string(fn_last_error()).find("stream is NULL"), std::string::npos);
  uint64_t gen = 99;
  EXPECT_EQ(fn_workspace_generation(ctx, &gen), FN_OK);
  EXPECT_EQ(gen, 0u);  // nothing grew yet
  fn_context_destroy(ctx);
}

}  // namespace
