// Internal: what every engine op (embedding.cu, residual.cu, rope_kv.cu, attention.cu, glu.cu,
// bias.cu, logit_softcap.cu, sampling.cu, decode_attention.cu's entry) uses: the element types,
// block reductions, PDL launches and the Status helpers, by their short names in
// flashnorm::kernels::cuda.
#pragma once

#include <cuda_runtime.h>

#include "elements.cuh"
#include "flashnorm/kernels/cuda/engine_ops.h"
#include "pdl.cuh"
#include "reduce.cuh"
#include "status.cuh"

namespace flashnorm::kernels::cuda {
using detail::aligned16;
using detail::BF16;
using detail::block_sum;
using detail::by_dtype;
using detail::FP16;
using detail::invalid;
using detail::launch_ex;
using detail::launched;
using detail::pdl_begin;
}  // namespace flashnorm::kernels::cuda
