// The kRstdPdl prefill GEMMs of flashnorm_linear (prefill_sm90.h): the rstd kernel, then the
// CUTLASS sm90 GEMM launched behind it with programmatic dependent launch, whose epilogue waits
// for it and multiplies every row by its rstd (prefill_gemm.cuh). A translation unit of its own:
// 40 more GEMM instantiations (10 tiles x bf16/fp16 x y in dtype / fp32), compiled in parallel
// with prefill_sm90.cu's.
#include "prefill_sm90.h"

#if FLASHNORM_HAVE_CUTLASS
#include "prefill_gemm.cuh"
#endif

namespace flashnorm::kernels::cuda::detail {

#if FLASHNORM_HAVE_CUTLASS
namespace {
using namespace prefill;

template <class F>
auto with_pdl_gemm(DType dt, bool y_f32, int tile, const F& f) {
  using cutlass::bfloat16_t;
  using cutlass::half_t;
  constexpr PrefillMode kP = PrefillMode::kRstdPdl;
  if (dt == DType::kFP16)
    return y_f32 ? with_tile<half_t, float, kP>(tile, f) : with_tile<half_t, half_t, kP>(tile, f);
  return y_f32 ? with_tile<bfloat16_t, float, kP>(tile, f)
               : with_tile<bfloat16_t, bfloat16_t, kP>(tile, f);
}
}  // namespace

size_t prefill_pdl_workspace(const LinearArgs& p, int tile, int order, int sm_count) {
  return with_pdl_gemm(p.dtype, p.y_f32, tile, WorkspaceOf{p, sm_count, order});
}

Status launch_prefill_pdl(const LinearArgs& p, int tile, int order, int sm_count, void* workspace,
                          cudaStream_t s, bool* refused, const PrefillRstd& r) {
  return with_pdl_gemm(p.dtype, p.y_f32, tile,
                       LaunchOf{p, sm_count, order, workspace, s, refused, &r});
}

#else  // no CUTLASS in this build

size_t prefill_pdl_workspace(const LinearArgs&, int, int, int) { return 0; }
Status launch_prefill_pdl(const LinearArgs&, int, int, int, void*, cudaStream_t, bool* refused,
                          const PrefillRstd&) {
  if (refused) *refused = true;
  return {Code::kUnsupported, "flashnorm_linear: this build has no CUTLASS (fused prefill)"};
}

#endif

}  // namespace flashnorm::kernels::cuda::detail
