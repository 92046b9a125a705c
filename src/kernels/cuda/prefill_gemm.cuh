// Internal: the CUTLASS 3.x templates of the prefill GEMM (prefill_sm90.cu: in-mainloop reduction
// and plain; prefill_sm90_pdl.cu: rstd by a PDL-overlapped kernel). Included only by those two
// translation units, and only when FLASHNORM_HAVE_CUTLASS is set.
// Over 500 lines on purpose: one kernel family (the collective, its two mainloops and the kernel
// types built on them) whose parts are instantiated together; split, each part would be unreadable
// without the others.
//
// Built on the CUTLASS 3.x API (headers of the pinned nvidia-cutlass 4.2 wheel): the TMA
// warp-specialized sm90 kernels (cooperative and ping-pong), their epilogue, and the mainloop
// collectives of cutlass/gemm/collective/sm90_mma_tma_gmma_{ss,rs}_warpspecialized.hpp, of which
// RowScaledMainloop and RowScaledRsMainloop replace the consumer side (mma).
//
// Joins (docs/design.md section 2):
//  - kFused: inside one thread: a row's scale is applied by the thread that holds that row's
//    accumulators, after warpgroup_wait<0> (every wgmma of the tile has completed) and after the
//    quad reduction of the partial sums over all k-tiles of the tile (each work tile spans the
//    whole K: data-parallel persistent scheduler, no split-K).
//  - kRstdPdl: the rstd kernel runs first on the stream and the GEMM is launched behind it with
//    programmatic dependent launch; every consumer thread executes griddepcontrol.wait (the rstd
//    grid has completed, its memory is visible) after its tile's mainloop and before its epilogue,
//    the only code that reads rstd.
#pragma once

#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/half.h>
#include <fmt/format.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "launch.h"
#include "prefill_sm90.h"

namespace flashnorm::kernels::cuda::detail::prefill {

using namespace cute;

// Squares of 8 packed 16-bit values, summed in fp32.
template <class T>
__device__ __forceinline__ float sum_squares8(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float lo, hi;
    if constexpr (std::is_same_v<T, cutlass::bfloat16_t>) {
      lo = __uint_as_float(w[i] << 16);
      hi = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      const float2 f = __half22float2(h);
      lo = f.x, hi = f.y;
    }
    s = fmaf(lo, lo, s);
    s = fmaf(hi, hi, s);
  }
  return s;
}

// What both consumers below share: eps and 1 / K in the kernel parameters, and the end of a tile
// (the join: quad reduction of the row sums, rstd, every wgmma completed, accumulators scaled).
template <class Base>
struct RowScaleCollective : Base {
  struct Arguments : Base::Arguments {
    float eps = 1e-6f;
    int pdl_wait = 0;  // kRstdPdl: griddepcontrol.wait at the end of every tile's mainloop
  };
  struct Params : Base::Params {
    float eps;
    float inv_k;  // 1 / K of the problem (the mean's divisor)
    int pdl_wait;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& shape, Arguments const& args,
                                        void* workspace) {
    auto [M, N, K, L] = append<4>(shape, 1);
    (void)M, (void)N, (void)L;
    return Params{Base::to_underlying_arguments(shape, args, workspace), args.eps,
                  1.0f / static_cast<float>(K), args.pdl_wait};
  }

  // ss[2 mi + h]: this thread's partial sum of squares of the row of accumulator values
  // accum((c, h, v), mi, ni) (the wgmma D fragment: rows r and r + 8 of each 64-row block); the
  // four threads of a quad hold the same rows. kRowScale = false only waits for the wgmmas.
  template <bool kRowScale, class FrgTensorC, int kRows>
  CUTLASS_DEVICE static void finish(FrgTensorC& accum, const float (&ss)[kRows],
                                    Params const& params) {
    constexpr int kMmaM = decltype(size<1>(accum))::value;
    static_assert(kRows == 2 * kMmaM);
    float rstd[kRows];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRows; ++j) {
      float s = ss[j];
      s += __shfl_xor_sync(0xffffffff, s, 1);
      s += __shfl_xor_sync(0xffffffff, s, 2);
      rstd[j] = rsqrtf(s * params.inv_k + params.eps);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(accum);
    // kRstdPdl's join: the rstd kernel this GEMM was launched behind (PDL) has completed and its
    // writes are visible before this thread goes on to the epilogue, which reads rstd. Plain loads
    // of the epilogue come after this instruction in program order (asm volatile + memory clobber).
    if (params.pdl_wait) asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (kRowScale) {
      CUTLASS_PRAGMA_UNROLL
      for (int mi = 0; mi < kMmaM; ++mi) {
        CUTLASS_PRAGMA_UNROLL
        for (int ni = 0; ni < size<2>(accum); ++ni) {
          CUTLASS_PRAGMA_UNROLL
          for (int v = 0; v < size<0, 2>(accum); ++v) {
            CUTLASS_PRAGMA_UNROLL
            for (int h = 0; h < 2; ++h) {
              CUTLASS_PRAGMA_UNROLL
              for (int c = 0; c < 2; ++c) accum(make_coord(c, h, v), mi, ni) *= rstd[2 * mi + h];
            }
          }
        }
      }
    }
    warpgroup_fence_operand(accum);
  }
};

// The mainloop collective of CUTLASS's sm90 TMA warp-specialized GEMM (Base: the producer side,
// TMA loads, pipeline and shared storage are Base's) with a consumer that also takes the sum of
// squares of the A (= x) rows from the staged tiles and scales the accumulators by rstd.
// kRowScale = false: the same loop without the squares and the scale (a plain GEMM), for the
// benchmark's measurement of what the in-kernel reduction costs.
template <class Base, bool kRowScale>
struct RowScaledMainloop : RowScaleCollective<Base> {
  using Common = RowScaleCollective<Base>;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;
  using typename Common::Params;
  using ElementA = typename Base::ElementA;

  // Same contract as Base::mma: consumes k_tiles stages starting at `read`, releases all but the
  // last (Base::mma_tail releases that one), leaves the tile's accumulators in accum, here already
  // multiplied by rstd of their rows.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState read, FrgTensorC& accum,
                          int k_tiles, int thread_idx, TensorStorage& smem, Params const& params) {
    static_assert(std::is_same_v<ElementA, cutlass::bfloat16_t> ||
                  std::is_same_v<ElementA, cutlass::half_t>);
    constexpr int kBlkK = size<2>(TileShape{});
    constexpr int kQuarter = kBlkK / 4;  // k elements of a row one thread of a quad squares
    static_assert(kQuarter % 8 == 0, "16-byte chunks of a staged x row");
    constexpr int kMmaM = decltype(size<1>(accum))::value;
    constexpr int kRows = 2 * kMmaM;  // wgmma D fragment: rows r and r + 8 per 64-row block

    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.data()), SmemLayoutA{});  // (BM,BK,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.data()), SmemLayoutB{});  // (BN,BK,PIPE)
    TiledMma tiled_mma;
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto wg_mma = tiled_mma.get_slice(warp_group * cutlass::NumThreadsPerWarpGroup);
    Tensor tCrA = wg_mma.make_fragment_A(wg_mma.partition_A(sA));  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB));  // (MMA,MMA_N,MMA_K,PIPE)

    // The tile rows whose accumulators this thread holds: (m, n) coordinates of its fragment.
    Tensor tCcC =
        tiled_mma.get_slice(thread_idx).partition_C(make_identity_tensor(take<0, 2>(TileShape{})));
    int row[kRows];
    CUTLASS_PRAGMA_UNROLL
    for (int mi = 0; mi < kMmaM; ++mi) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) row[2 * mi + h] = get<0>(tCcC(make_coord(0, h, 0), mi, 0));
    }
    // The four threads of a quad (lane % 4) hold the same rows; each squares a quarter of the
    // k-tile.
    const int k0 = (thread_idx % 4) * kQuarter;
    float ss[kRows];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRows; ++j) ss[j] = 0.f;

    PipelineState release = read;
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int t = 0; t < k_tiles; ++t) {
      pipeline.consumer_wait(read, pipeline.consumer_try_wait(read));
      asm volatile("" ::: "memory");  // the plain loads of the stage below stay after the wait
      const int stage = read.index();
      if constexpr (kRowScale) {
        // Squares of this thread's rows in the staged x tile (TMA zero fills rows >= M and
        // k >= K, which add nothing), while the previous k-tile's wgmmas still run. The 128-byte
        // swizzle of the K-major GMMA layout permutes the 16-byte chunks of a row (chunk c of
        // row r lands at c ^ (r % 8)), so each chunk's address comes from the swizzled layout;
        // only the 8 elements inside a chunk are contiguous.
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kRows; ++j) {
          CUTLASS_PRAGMA_UNROLL
          for (int c = 0; c < kQuarter; c += 8)
            ss[j] +=
                sum_squares8<ElementA>(*reinterpret_cast<const uint4*>(&sA(row[j], k0 + c, stage)));
        }
        // The stage's release is signalled by one thread of the warpgroup once this k-tile's
        // wgmmas have completed, which needs every warp to have issued them: so every warp's
        // reads of the stage must be finished (their values consumed) before it issues them.
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kRows; ++j) asm volatile("" : "+f"(ss[j])::"memory");
      }
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < size<2>(tCrA); ++kb) {
        cute::gemm(tiled_mma, tCrA(_, _, kb, stage), tCrB(_, _, kb, stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_wait<1>();  // the previous k-tile's wgmmas are done: release its stage
      warpgroup_fence_operand(accum);
      if (t > 0) {
        pipeline.consumer_release(release);
        ++release;
      }
      ++read;
    }
    // Join: the row sums cover every k-tile of the tile (quad reduction), and every wgmma that
    // writes accum has completed (wait<0>), before any accumulator is scaled.
    Common::template finish<kRowScale>(accum, ss, params);
  }
};

// The register-A (RS) variant: CUTLASS's sm90 RS mainloop collective (A copied from shared memory
// into registers with ldmatrix, B read by the wgmma from shared memory), with a consumer (mma) of
// our own. The x values a thread squares are its own A fragment, already in registers for the
// wgmma: the rows of its accumulators (the four threads of a quad hold their rows' k columns
// between them), so the reduction adds no shared-memory traffic.
template <class Base, bool kRowScale>
struct RowScaledRsMainloop : RowScaleCollective<Base> {
  using Common = RowScaleCollective<Base>;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;
  using typename Common::Params;
  using ElementA = typename Base::ElementA;
  using SmemCopyAtomA = typename Base::SmemCopyAtomA;

  // Same contract as Base::mma (all stages but the last released; Base::mma_tail releases it).
  // Per k-tile: ldmatrix of k-block 0, then for each k-block: ldmatrix of the next, squares of
  // this one, wgmma, at most two wgmma batches left in flight (the next ldmatrix overwrites the
  // registers of the batch kBlocks = 4 back). A stage is released once the wgmmas of the next
  // k-tile's last k-block are issued and all but two have completed: then every batch that read it
  // (its B by the wgmma, its A by every warp's ldmatrix before that warp issued them) is done.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState read, FrgTensorC& accum,
                          int k_tiles, int thread_idx, TensorStorage& smem, Params const& params) {
    static_assert(std::is_same_v<ElementA, cutlass::bfloat16_t> ||
                  std::is_same_v<ElementA, cutlass::half_t>);
    constexpr int kMmaM = decltype(size<1>(accum))::value;
    constexpr int kRows = 2 * kMmaM;
    Tensor sA = as_position_independent_swizzle_tensor(
        make_tensor(make_smem_ptr(smem.smem_A.data()), SmemLayoutA{}));         // (BM,BK,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.data()), SmemLayoutB{});  // (BN,BK,PIPE)
    TiledMma tiled_mma;
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    auto wg_mma = tiled_mma.get_slice(warp_group * cutlass::NumThreadsPerWarpGroup);
    Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, Int<0>{}));  // (MMA,MMA_M,MMA_K)
    Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB));    // (MMA,MMA_N,MMA_K,PIPE)
    auto copy_a = make_tiled_copy_A(SmemCopyAtomA{}, tiled_mma);
    auto thr_copy_a = copy_a.get_thread_slice(thread_idx);
    Tensor tCrA_dst = thr_copy_a.retile_D(tCrA);   // (CPY,CPY_M,CPY_K)
    Tensor tCsA_src = thr_copy_a.partition_S(sA);  // (CPY,CPY_M,CPY_K,PIPE)
    constexpr int kBlocks = decltype(size<2>(tCrA))::value;
    // The ldmatrix of k-block kb + 1 overwrites the registers last read by the batch kBlocks back,
    // which must be older than the two left in flight: kBlocks >= 4.
    static_assert(kBlocks >= 4, "ldmatrix would overwrite registers of a wgmma still in flight");

    float ss[kRows];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRows; ++j) ss[j] = 0.f;
    PipelineState release = read;
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int t = 0; t < k_tiles; ++t) {
      pipeline.consumer_wait(read, pipeline.consumer_try_wait(read));
      const int stage = read.index();
      copy(copy_a, tCsA_src(_, _, 0, stage), tCrA_dst(_, _, 0));
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kBlocks; ++kb) {
        if (kb + 1 < kBlocks) copy(copy_a, tCsA_src(_, _, kb + 1, stage), tCrA_dst(_, _, kb + 1));
        if constexpr (kRowScale) {
          // wgmma A fragment (m64k16): value (c, h, v) of block mi is row 64 mi + 16 warp +
          // lane / 4 + 8 h, the same rows as the accumulators' (c, h, v)
          CUTLASS_PRAGMA_UNROLL
          for (int mi = 0; mi < kMmaM; ++mi) {
            CUTLASS_PRAGMA_UNROLL
            for (int v = 0; v < size<0, 2>(tCrA); ++v) {
              CUTLASS_PRAGMA_UNROLL
              for (int h = 0; h < 2; ++h) {
                CUTLASS_PRAGMA_UNROLL
                for (int c = 0; c < 2; ++c) {
                  const float a = static_cast<float>(tCrA(make_coord(c, h, v), mi, kb));
                  ss[2 * mi + h] = fmaf(a, a, ss[2 * mi + h]);
                }
              }
            }
          }
        }
        warpgroup_fence_operand(accum);
        warpgroup_arrive();
        cute::gemm(tiled_mma, tCrA(_, _, kb), tCrB(_, _, kb, stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        warpgroup_commit_batch();
        warpgroup_wait<2>();
        warpgroup_fence_operand(accum);
      }
      if (t > 0) {  // k-tile t-1's batches are all older than the two left in flight
        pipeline.consumer_release(release);
        ++release;
      }
      ++read;
    }
    Common::template finish<kRowScale>(accum, ss, params);
  }
};

// CUTLASS's RS collective for same-type 16-bit A and B, K-major both (what its collective builder
// assembles for mixed-input GEMMs, with ldmatrix for A).
template <class T, class Tile, class Cluster, class KernelSchedule, int kCarveout>
struct RsCollective {
  using AtomLayout = cute::conditional_t<
      cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
      Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _1, _1>>>;
  using TiledMma = decltype(make_tiled_mma(
      GMMA::rs_op_selector<T, T, float, Tile, GMMA::Major::K, GMMA::Major::K>(), AtomLayout{}));
  using GmemTiledCopyA = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<1>(Cluster{})));
  using GmemTiledCopyB = decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(
      shape<0>(Cluster{})));
  using SmemLayoutAtomA =
      decltype(cutlass::gemm::collective::detail::rs_smem_selector<
               GMMA::Major::K, T, decltype(get<0>(Tile{})), decltype(get<2>(Tile{}))>());
  using SmemLayoutAtomB =
      decltype(cutlass::gemm::collective::detail::rs_smem_selector<
               GMMA::Major::K, T, decltype(get<1>(Tile{})), decltype(get<2>(Tile{}))>());
  static constexpr int kStages = cutlass::gemm::collective::detail::compute_stage_count_or_override<
      cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, T, T, Tile, kCarveout>(
      cutlass::gemm::collective::StageCountAutoCarveout<kCarveout>{});
  using Op = cutlass::gemm::collective::CollectiveMma<
      cutlass::gemm::MainloopSm90TmaGmmaRmemAWarpSpecialized<kStages, Cluster, KernelSchedule>,
      Tile, T, cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>, T,
      cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>, TiledMma, GmemTiledCopyA,
      SmemLayoutAtomA, Copy_Atom<SM75_U32x4_LDSM_N, T>, cute::identity, GmemTiledCopyB,
      SmemLayoutAtomB, void, cute::identity>;
};

// T: x and W; TOut: y (T, or float for LinearArgs::y_f32).
// The epilogue of kRstdPdl: D = rstd[m] * acc (fp32), rounded once to TOut; rstd is an fp32
// column vector over M read from global memory (CUTLASS's column broadcast, predicated on m < M).
template <class TOut, class Tile>
using RstdEpilogueOp = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, TOut, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ColBroadcast<0, Tile, float, float, Stride<_1, _0, int64_t>>,
    cutlass::epilogue::fusion::Sm90AccFetch>;

template <class T, class TOut, class Tile, class Cluster, class KernelSchedule,
          class EpilogueSchedule, PrefillMode kMode, bool kRs = false>
struct FusedGemm {
  static constexpr bool kRowScale = kMode == PrefillMode::kFused;  // in-mainloop reduction
  static constexpr bool kPdl = kMode == PrefillMode::kRstdPdl;
  using RowMajor = cutlass::layout::RowMajor;        // x [M, K], y [M, N]
  using ColumnMajor = cutlass::layout::ColumnMajor;  // W [N, K] is B = K x N column-major
  static constexpr int kAlign = 8;                   // 16 bytes of T
  static constexpr int kAlignOut = 16 / static_cast<int>(sizeof(TOut));
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor, kAlignOut,
      TOut, RowMajor, kAlignOut, EpilogueSchedule,
      cute::conditional_t<kPdl, RstdEpilogueOp<TOut, Tile>,
                          cutlass::epilogue::fusion::LinearCombination<TOut, float, void, float>>>::
      CollectiveOp;
  using MainloopBase = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, RowMajor, kAlign, T, ColumnMajor,
      kAlign, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Mainloop = cute::conditional_t<
      kRs,
      RowScaledRsMainloop<
          typename RsCollective<T, Tile, Cluster, KernelSchedule,
                                static_cast<int>(sizeof(typename Epilogue::SharedStorage))>::Op,
          kRowScale>,
      RowScaledMainloop<MainloopBase, kRowScale>>;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments arguments(const LinearArgs& p, int sm_count, int order,
                                            const PrefillRstd* r) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(p.M), static_cast<int>(p.N), static_cast<int>(p.K), 1};
    auto* x = static_cast<const T*>(p.x);
    auto* w = static_cast<const T*>(p.w);
    const StrideA da = make_stride(p.ldx, Int<1>{}, p.ldx * p.M);
    const StrideB db = make_stride(p.ldw, Int<1>{}, p.ldw * p.N);
    const StrideD dd = make_stride(p.ldy, Int<1>{}, p.ldy * p.M);
    args.mainloop = typename Mainloop::Arguments{{x, da, w, db}, p.eps, kPdl && r && r->join};
    if constexpr (kPdl) {
      using Col = cutlass::epilogue::fusion::Sm90ColBroadcast<0, Tile, float, float,
                                                              Stride<_1, _0, int64_t>>;
      typename Col::Arguments col{};
      col.ptr_col = r ? r->rstd : nullptr;
      col.dCol = make_stride(Int<1>{}, Int<0>{}, static_cast<int64_t>(p.M));
      args.epilogue.thread = {col, {}, {}};
    } else {
      args.epilogue.thread.alpha = 1.0f;
      args.epilogue.thread.beta = 0.0f;
    }
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = dd;
    args.epilogue.ptr_D = static_cast<TOut*>(p.y);
    args.epilogue.dD = dd;
    int device = 0;
    cudaGetDevice(&device);
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count;
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.max_swizzle_size = kPrefillOrderTable[order].swizzle;
    args.scheduler.raster_order = kPrefillOrderTable[order].raster == 0   ? Raster::Heuristic
                                  : kPrefillOrderTable[order].raster == 1 ? Raster::AlongM
                                                                          : Raster::AlongN;
    return args;
  }

  static size_t workspace(const LinearArgs& p, int sm_count, int order) {
    return Gemm::get_workspace_size(arguments(p, sm_count, order, nullptr));
  }

  // kRstdPdl (r non-null): the GEMM's setup (initialize: kernel attributes, the scheduler's
  // workspace), then the rstd kernel on s, launched with PDL behind whatever precedes it: it waits
  // for that kernel (griddepcontrol.wait: x complete, the previous reader of rstd done) before it
  // lets the GEMM launch (launch_dependents), so when the GEMM starts, x is complete; the GEMM,
  // launched with PDL right behind it, runs its mainloop (x, W: not written by the rstd kernel)
  // while the reduction runs, and its epilogue reads rstd only after griddepcontrol.wait
  // (RowScaleCollective::finish).
  static Status launch(const LinearArgs& p, int sm_count, int order, void* workspace,
                       cudaStream_t s, bool* refused, const PrefillRstd* r) {
    if (kPdl && !r)
      return {Code::kInvalidArgument, "flashnorm_linear: rstd-by-PDL prefill without its buffer"};
    auto args = arguments(p, sm_count, order, r);
    Gemm gemm;
    cutlass::Status st = gemm.can_implement(args);
    if (st != cutlass::Status::kSuccess) {
      if (refused) *refused = true;
      return {Code::kUnsupported, fmt::format("flashnorm_linear: fused prefill: CUTLASS cannot "
                                              "implement M={} N={} K={} ({})",
                                              p.M, p.N, p.K, cutlass::cutlassGetStatusString(st))};
    }
    st = gemm.initialize(args, workspace, s);
    if (kPdl && st == cutlass::Status::kSuccess) {
      const cudaError_t e = launch_rstd(p.dtype, p.M, p.K, p.x, p.ldx, p.eps, r->rstd, s, r->ctas,
                                        r->delay, /*pdl=*/true, /*wait_prev=*/r->join);
      if (e != cudaSuccess)
        return {Code::kCudaError,
                fmt::format("flashnorm_linear: rstd kernel launch: {}", cudaGetErrorString(e))};
    }
    if (st == cutlass::Status::kSuccess) st = gemm.run(s, nullptr, kPdl);
    if (st != cutlass::Status::kSuccess) {
      const cudaError_t e = cudaGetLastError();
      return {Code::kCudaError,
              fmt::format("flashnorm_linear: fused prefill launch: {} ({})",
                          cutlass::cutlassGetStatusString(st), cudaGetErrorString(e))};
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      return {Code::kCudaError,
              fmt::format("flashnorm_linear: fused prefill launch: {}", cudaGetErrorString(e))};
    return {};
  }
};

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
using PingPong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingPongEpi = cutlass::epilogue::TmaWarpSpecialized;

template <class T, class D, PrefillMode S>
using Tile0 = FusedGemm<T, D, Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, S>;
template <class T, class D, PrefillMode S>
using Tile1 = FusedGemm<T, D, Shape<_128, _128, _64>, Shape<_1, _1, _1>, Coop, CoopEpi, S>;
template <class T, class D, PrefillMode S>
using Tile2 = FusedGemm<T, D, Shape<_64, _128, _64>, Shape<_1, _1, _1>, PingPong, PingPongEpi, S>;
template <class T, class D, PrefillMode S>
using Tile3 = FusedGemm<T, D, Shape<_64, _64, _64>, Shape<_1, _1, _1>, PingPong, PingPongEpi, S>;
template <class T, class D, PrefillMode S>
using Tile4 = FusedGemm<T, D, Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, S, true>;
template <class T, class D, PrefillMode S>
using Tile5 = FusedGemm<T, D, Shape<_128, _128, _64>, Shape<_1, _1, _1>, Coop, CoopEpi, S, true>;
template <class T, class D, PrefillMode S>
using Tile6 =
    FusedGemm<T, D, Shape<_64, _128, _64>, Shape<_1, _1, _1>, PingPong, PingPongEpi, S, true>;
template <class T, class D, PrefillMode S>
using Tile7 =
    FusedGemm<T, D, Shape<_64, _64, _64>, Shape<_1, _1, _1>, PingPong, PingPongEpi, S, true>;
// Shapes of the kind cuBLAS picks for large bf16 GEMMs on Hopper (ncu kernel names,
// docs/kernels.md: 256x96 / 320x128 / 192x192 with 1x2 or 2x1 clusters): a 256x128 tile
// multicasting x across a 1x2 cluster, and a 128x192 tile (different wave quantization over N).
template <class T, class D, PrefillMode S>
using Tile8 = FusedGemm<T, D, Shape<_256, _128, _64>, Shape<_1, _2, _1>, Coop, CoopEpi, S, true>;
template <class T, class D, PrefillMode S>
using Tile9 = FusedGemm<T, D, Shape<_128, _192, _64>, Shape<_2, _1, _1>, Coop, CoopEpi, S, true>;

// Calls f.template operator()<G>() with G the FusedGemm of (dtype, output type, tile); row_scale =
// false (the benchmark's plain-GEMM reference) exists for bf16 in and out only.
template <class T, class D, PrefillMode S, class F>
auto with_tile(int tile, const F& f) {
  switch (tile) {
    case 0:
      return f.template operator()<Tile0<T, D, S>>();
    case 1:
      return f.template operator()<Tile1<T, D, S>>();
    case 2:
      return f.template operator()<Tile2<T, D, S>>();
    case 3:
      return f.template operator()<Tile3<T, D, S>>();
    case 4:
      return f.template operator()<Tile4<T, D, S>>();
    case 5:
      return f.template operator()<Tile5<T, D, S>>();
    case 6:
      return f.template operator()<Tile6<T, D, S>>();
    case 7:
      return f.template operator()<Tile7<T, D, S>>();
    case 8:
      return f.template operator()<Tile8<T, D, S>>();
    default:
      return f.template operator()<Tile9<T, D, S>>();
  }
}
struct WorkspaceOf {
  const LinearArgs& p;
  int sms, order;
  template <class G>
  size_t operator()() const {
    return G::workspace(p, sms, order);
  }
};
struct LaunchOf {
  const LinearArgs& p;
  int sms, order;
  void* workspace;
  cudaStream_t s;
  bool* refused;
  const PrefillRstd* r;
  template <class G>
  Status operator()() const {
    return G::launch(p, sms, order, workspace, s, refused, r);
  }
};

}  // namespace flashnorm::kernels::cuda::detail::prefill
