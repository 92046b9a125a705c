// C ABI over LinearContext (include/flashnorm/kernels/cuda/c_api.h): translates arguments, maps
// Status codes, and keeps every exception on this side of the boundary.
#include "flashnorm/kernels/cuda/c_api.h"

#include <exception>
#include <new>
#include <string>
#include <vector>

#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/rms_norm.h"

namespace fk = flashnorm::kernels::cuda;

struct fn_context {
  fk::LinearContext ctx;
};

namespace {
thread_local std::string g_error;

// Records the message (which may fail to allocate: then the message is dropped, the code stays).
int fail(int code, const char* msg) noexcept {
  try {
    g_error = msg;
  } catch (...) {
    g_error.clear();
  }
  return code;
}
int fail(int code, const std::string& msg) noexcept { return fail(code, msg.c_str()); }

int from_status(const fk::Status& st) noexcept {
  switch (st.code) {
    case fk::Code::kOk:
      g_error.clear();
      return FN_OK;
    case fk::Code::kInvalidArgument:
      return fail(FN_INVALID_ARGUMENT, st.message);
    case fk::Code::kUnsupported:
      return fail(FN_UNSUPPORTED, st.message);
    case fk::Code::kCudaError:
      return fail(FN_CUDA_ERROR, st.message);
    case fk::Code::kCublasError:
      return fail(FN_CUBLAS_ERROR, st.message);
  }
  return fail(FN_INTERNAL_ERROR, st.message);
}

bool to_dtype(int d, fk::DType* out) {
  if (d == FN_BF16)
    *out = fk::DType::kBF16;
  else if (d == FN_FP16)
    *out = fk::DType::kFP16;
  else
    return false;
  return true;
}

bool to_impl(int i, fk::LinearImpl* out) {
  switch (i) {
    case FN_AUTO:
      *out = fk::LinearImpl::kAuto;
      return true;
    case FN_DECODE:
      *out = fk::LinearImpl::kDecode;
      return true;
    case FN_PREFILL:
      *out = fk::LinearImpl::kPrefill;
      return true;
    case FN_TWO_STREAM:
      *out = fk::LinearImpl::kTwoStream;
      return true;
  }
  return false;
}

int from_impl(fk::LinearImpl i) {
  switch (i) {
    case fk::LinearImpl::kDecode:
      return FN_DECODE;
    case fk::LinearImpl::kPrefill:
      return FN_PREFILL;
    case fk::LinearImpl::kTwoStream:
      return FN_TWO_STREAM;
    case fk::LinearImpl::kAuto:
      break;
  }
  return FN_AUTO;
}

template <class F>
int guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(FN_INTERNAL_ERROR, "flashnorm: out of host memory");
  } catch (const std::exception& e) {
    return fail(FN_INTERNAL_ERROR, e.what());
  } catch (...) {
    return fail(FN_INTERNAL_ERROR, "flashnorm: unknown exception");
  }
}
}  // namespace

extern "C" {

int fn_context_create(fn_context** out) noexcept {
  if (!out) return fail(FN_INVALID_ARGUMENT, "fn_context_create: out is NULL");
  *out = nullptr;
  try {
    *out = new fn_context{};
  } catch (const std::bad_alloc&) {
    return fail(FN_INTERNAL_ERROR, "fn_context_create: out of host memory");
  } catch (const std::exception& e) {  // no device, cuBLASLt or a device allocation failed
    return fail(FN_CUDA_ERROR, e.what());
  } catch (...) {
    return fail(FN_INTERNAL_ERROR, "fn_context_create: unknown exception");
  }
  g_error.clear();
  return FN_OK;
}

void fn_context_destroy(fn_context* ctx) noexcept { delete ctx; }

int fn_linear(fn_context* ctx, int dtype, int64_t M, int64_t N, int64_t K, const void* x,
              int64_t ldx, const void* w, int64_t ldw, void* y, int64_t ldy, float eps, int impl,
              void* stream) noexcept {
  if (!ctx) return fail(FN_INVALID_ARGUMENT, "fn_linear: ctx is NULL");
  fk::LinearArgs a;
  fk::LinearImpl im;
  if (!to_dtype(dtype, &a.dtype))
    return fail(FN_INVALID_ARGUMENT, "fn_linear: dtype must be FN_BF16 or FN_FP16");
  if (!to_impl(impl, &im)) return fail(FN_INVALID_ARGUMENT, "fn_linear: unknown impl");
  a.M = M, a.N = N, a.K = K, a.x = x, a.ldx = ldx, a.w = w, a.ldw = ldw, a.y = y, a.ldy = ldy;
  a.eps = eps;
  return guarded(
      [&] { return from_status(ctx->ctx.run(a, im, static_cast<cudaStream_t>(stream))); });
}

int fn_tune_linear(fn_context* ctx, int dtype, int64_t M, int64_t N, int64_t K,
                   const void* const* x, const void* const* w, void* const* y, int n, float eps,
                   void* stream, double* gemm_us, double* decode_us, double* prefill_us) noexcept {
  for (double* p : {gemm_us, decode_us, prefill_us})
    if (p) *p = -1.0;
  if (!ctx) return fail(FN_INVALID_ARGUMENT, "fn_tune_linear: ctx is NULL");
  if (n < 1 || !x || !w || !y)
    return fail(FN_INVALID_ARGUMENT, "fn_tune_linear: needs n >= 1 and non-NULL x, w, y arrays");
  if (!stream)
    return fail(FN_INVALID_ARGUMENT,
                "fn_tune_linear: stream is NULL (the legacy default stream cannot be captured)");
  fk::DType dt;
  if (!to_dtype(dtype, &dt))
    return fail(FN_INVALID_ARGUMENT, "fn_tune_linear: dtype must be FN_BF16 or FN_FP16");
  return guarded([&] {
    std::vector<fk::LinearArgs> sets(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      fk::LinearArgs& a = sets[static_cast<size_t>(i)];
      a.dtype = dt, a.M = M, a.N = N, a.K = K, a.x = x[i], a.ldx = K, a.w = w[i], a.ldw = K;
      a.y = y[i], a.ldy = N, a.eps = eps;
      fk::Status v = fk::validate_linear(a, fk::LinearImpl::kPrefill);
      if (!v.ok()) return from_status(v);
    }
    fk::LinearContext::ShapeTuning t;
    const fk::Status st =
        ctx->ctx.tune_shape(sets.data(), n, static_cast<cudaStream_t>(stream), &t);
    if (!st.ok()) return from_status(st);
    if (gemm_us) *gemm_us = t.gemm_us;
    if (decode_us) *decode_us = t.decode_us;
    if (prefill_us) *prefill_us = t.prefill_us;
    g_error.clear();
    return static_cast<int>(FN_OK);
  });
}

int fn_choose(fn_context* ctx, int64_t M, int64_t N, int64_t K, int* impl) noexcept {
  if (!ctx || !impl) return fail(FN_INVALID_ARGUMENT, "fn_choose: ctx and impl must be non-NULL");
  if (M < 1 || N < 1 || K < 1) return fail(FN_INVALID_ARGUMENT, "fn_choose: M, N, K must be >= 1");
  fk::LinearArgs a;
  a.M = M, a.N = N, a.K = K;
  return guarded([&] {
    *impl = from_impl(ctx->ctx.choose(a));
    g_error.clear();
    return static_cast<int>(FN_OK);
  });
}

int fn_workspace_generation(fn_context* ctx, uint64_t* generation) noexcept {
  if (!ctx || !generation)
    return fail(FN_INVALID_ARGUMENT,
                "fn_workspace_generation: ctx and generation must be non-NULL");
  *generation = ctx->ctx.workspace_generation();
  g_error.clear();
  return FN_OK;
}

const char* fn_last_error(void) noexcept { return g_error.c_str(); }

}  // extern "C"
