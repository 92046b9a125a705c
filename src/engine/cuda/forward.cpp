// The CUDA engine's forward pass (internal.h): per layer, the normed q|k|v projection, RoPE /
// QK-norm / KV write and attention, the o projection and residual add, the normed gate|up
// projection, the GLU, the down projection and residual add; then the normed LM head, the final
// logit soft-capping (Gemma 3, where the config has it) and the sampler. The normed projections are
// where the modes differ (engine/cuda_engine.h).
#include <algorithm>

#include "flashnorm/error.h"
#include "internal.h"

namespace flashnorm::cuda_engine {

fk::GluKind Forward::glu_kind() const {
  return hooks.act == Activation::GeluTanh ? fk::GluKind::kGeGLU : fk::GluKind::kSwiGLU;
}

bool Forward::glu_in_down(int T) const {
  return opt.launch.fuse_decode_ops && decode_path(T) && T <= 16 &&
         size_t(T) * d.F * 2 <= 48 * 1024 &&
         (!w.quant_down || T == 1);  // quant_gemv's GLU variant: M = 1
}

bool Forward::glu_in_gate_up(int T, const DeviceWeights::Layer& ly) const {
  return opt.launch.quant_glu_out && T == 1 && glu_in_down(T) && ly.qgu.parts.size() == 1 &&
         !ly.bgu.get() &&
         fk::quant_gemv_split(ly.qgu.parts[0].type, 1, ly.qgu.N, ly.qgu.K, opt.launch.pdl) == 1;
}

bool Forward::decode_path(int M) const {
  return M <= gemv_rows && opt.launch.plain == PlainGemm::kAuto;
}

// y[M, N] = x[M, K] W[N, K]^T (+ bias [N] dt when set) with no normalization (same kernel in both
// modes), the fused ops of ProjOut on the decode path only. A bias outside the decode path needs
// fp32 y (add_bias after the GEMM). A quantized projection takes quant_gemv up to kQuantGemvMaxM
// tokens, else its expanded tile; it needs fp32 y and neither fused op.
void Forward::plain(const void* x, int M, const ProjWeights& pw, const ProjOut& out) {
  const int N = pw.N, K = pw.K, ldy = out.ldy == 0 ? N : out.ldy;
  const void* wt = pw.w;
  if (pw.quantized()) {
    if (!out.y_f32) throw Error("internal: a quantized projection with a dt output");
    if (M <= kQuantGemvMaxM) return quant(x, M, pw, out, /*gain=*/nullptr, /*rstd=*/false);
    if (out.add_residual || out.glu) throw Error("internal: a fused op on a quantized prompt pass");
    wt = expand(*pw.q, nullptr);
  }
  // W just written by quant_dequantize (the expanded tile): no PDL, whose kernel streams W before
  // it waits for the preceding kernel (LinearArgs::pdl)
  const bool w_written = wt == ws.wtile.get();
  if (decode_path(M)) {
    fk::LinearArgs a;
    a.dtype = dt, a.M = M, a.N = N, a.K = K, a.x = x, a.ldx = out.glu ? 2 * K : K, a.w = wt;
    a.ldw = K, a.y = out.y, a.ldy = ldy, a.eps = cfg.eps, a.scale_mask = w.zero_mask.as<uint8_t>();
    a.y_f32 = out.y_f32, a.pdl = opt.launch.pdl && !w_written, a.x_glu = out.glu;
    a.glu_kind = glu_kind(), a.bias = pw.bias;
    if (out.add_residual) {
      a.y = ws.x32.get(), a.ldy = d.H, a.y_f32 = true, a.accumulate = true;
      a.y_rounded = ws.xb.get();
    }
    decode_gemv(a);
  } else {
    if (out.add_residual || out.glu)
      throw Error("internal: fused decode op outside the decode path");
    if (pw.bias && !out.y_f32) throw Error("internal: a bias outside the decode path needs fp32 y");
    ok(ctx.gemm(dt, M, N, K, x, K, wt, K, out.y, ldy, nullptr, s, out.y_f32));
    if (pw.bias) {
      ok(fk::add_bias(dt, M, N, static_cast<float*>(out.y), ldy, pw.bias, s, opt.launch.pdl));
    }
  }
}

// y = normalized(x) W^T for a projection fed by an RMSNorm (NormIn: its rows of xb, gains, mask).
// Standard runs the norm (unless the preceding residual add already wrote xn:
// StandardNorm::kFusedAdd) then the plain projection; FlashNorm runs flashnorm_linear on raw x with
// the folded W, or in a norm_in_add pass the plain projection on xn = x * rstd (written by the
// residual add; by a gainless rms_norm for the first layer) with the folded W (native weights: xn =
// x * rstd * g, the dt gain applied by the add or that rms_norm). in.keep_gain: FlashNorm
// mode's tied LM head (TiedHead::kKeepGain), normalized as in Standard mode since its gain is not
// folded. bias ([N] dt, or null) is added last, after the FlashNorm row scale: y = rstd * (x W*^T)
// + b. A quantized projection (q; gain32 its fp32 gain) runs, in FlashNorm mode, quant_gemv on raw
// x with the gain applied to x and rstd to the rows of its scaled parts, or for longer passes the
// deferred GEMM on its tile expanded with the gain folded in; in a norm_in_add pass, and in
// Standard mode, the plain quantized projection of xn = x * rstd * g. In a norm_in_add pass every
// column is scaled, mask and all_unscaled included: the Standard computation, which the QK-norm's
// cancellation matches up to its eps.
void Forward::normed(const NormIn& in, const ProjWeights& pw, const ProjOut& out) {
  if (out.add_residual || out.glu) throw Error("internal: a fused op on a normed projection");
  const int M = in.M, N = pw.N, ldy = out.ldy == 0 ? N : out.ldy;
  const bool quantized = pw.quantized();
  const void* x = static_cast<const char*>(ws.xb.get()) + size_t(in.row0) * d.H * 2;
  const void* xnr = static_cast<const char*>(ws.xn.get()) + size_t(in.row0) * d.H * 2;
  // xn = RMSNorm(x) * g (g null: 1) unless the preceding residual add already wrote it
  auto norm_into_xn = [&](const void* g) {
    if (!xn_ready) {
      prof.op(kNorm, s, [&] {
        fk::RmsNormArgs a;
        a.dtype = dt, a.M = M, a.K = d.H, a.x = x, a.ldx = d.H, a.gain = g;
        a.y = const_cast<void*>(xnr), a.ldy = d.H, a.eps = cfg.eps, a.pdl = opt.launch.pdl;
        ok(fk::rms_norm(a, s));
      });
    }
    xn_ready = false;
  };
  if (mode == NormMode::Standard || in.keep_gain) {
    norm_into_xn(in.gain);
    prof.op(kNormedProj, s, [&] { plain(xnr, M, pw, out); });
    return;
  }
  // the LM head past its decode GEMV rows (head_gemv_rows: cuBLASLt was faster there) normalizes
  // x first too, so that its projection is that cuBLASLt GEMM
  const bool head_gemm =
      head_call && M > gemv_rows && opt.flashnorm.deferred != Deferred::kTwoStream;
  if (norm_in_add || head_gemm) {
    // the first layer's or the head's (no add before it wrote xn). Folded W: xn = x * rstd. Native
    // weights, whose gain cannot be folded into their blocks: xn = x * rstd * g as Standard
    // computes it (the residual add multiplies by g too: layer(), next_folded false), and the
    // plain quantized projection; expanding the tile with the gain instead cost 32 strided fp32
    // loads per run of 32 in quant_dequantize (Llama-3-8B Q4_1 prompts, 512 tokens: 8450 against
    // 11169 tokens/s in Standard mode on Hopper).
    norm_into_xn(quantized ? in.gain : nullptr);
    prof.op(kNormedProj, s, [&] { plain(xnr, M, pw, out); });
    return;
  }
  prof.op(kNormedProj, s, [&] {
    const void* wt = pw.w;
    if (quantized) {
      if (!out.y_f32) throw Error("internal: a quantized projection with a dt output");
      if (M <= kQuantGemvMaxM) return quant(x, M, pw, out, in.gain32->as<float>(), /*rstd=*/true);
      wt = expand(*pw.q, in.gain32->as<float>());  // the gain folded into the tile
    }
    if (in.all_unscaled)  // dropped: no rstd at all
      return plain(x, M, ProjWeights{.w = wt, .N = N, .K = pw.K, .bias = pw.bias}, out);
    fk::LinearArgs a;
    a.dtype = dt, a.M = M, a.N = N, a.K = d.H, a.x = x, a.ldx = d.H, a.w = wt, a.ldw = d.H;
    a.y = out.y, a.ldy = ldy, a.eps = cfg.eps, a.scale_mask = in.mask, a.y_f32 = out.y_f32;
    a.bias = pw.bias;
    const bool decode = M <= gemv_rows;
    a.pdl = opt.launch.pdl && decode && wt != ws.wtile.get();  // kDecode's option (plain's note)
    const fk::LinearImpl impl = opt.flashnorm.deferred == Deferred::kTwoStream
                                    ? fk::LinearImpl::kTwoStream
                                : decode ? fk::LinearImpl::kDecode
                                         : fk::LinearImpl::kAuto;
    if (impl == fk::LinearImpl::kDecode) return decode_gemv(a);
    ok(ctx.run(a, impl, s));
  });
}

void Forward::decode_gemv(const fk::LinearArgs& a) {
  if (a.M <= kDecodeSliceRows) return ok(ctx.run(a, fk::LinearImpl::kDecode, s));
  if (a.x_glu) throw Error("internal: a sliced decode GEMV with the GLU input");
  const size_t xe = 2, ye = a.y_f32 ? 4 : 2;  // x (no GLU input here) and y_rounded in dtype
  for (int64_t r0 = 0; r0 < a.M; r0 += kDecodeSliceRows) {
    fk::LinearArgs b = a;
    b.M = std::min<int64_t>(kDecodeSliceRows, a.M - r0);
    b.x = static_cast<const char*>(a.x) + size_t(r0) * a.ldx * xe;
    b.y = static_cast<char*>(a.y) + size_t(r0) * a.ldy * ye;
    if (a.y_rounded) b.y_rounded = static_cast<char*>(a.y_rounded) + size_t(r0) * a.ldy * xe;
    ok(ctx.run(b, fk::LinearImpl::kDecode, s));
  }
}

void Forward::quant(const void* x, int M, const ProjWeights& pw, const ProjOut& out,
                    const float* gain, bool rstd) {
  const QuantProj& q = *pw.q;
  const void* bias = pw.bias;
  const bool glu = out.glu, add_residual = out.add_residual;
  const int ldy = out.ldy == 0 ? pw.N : out.ldy;
  if (add_residual && bias) throw Error("internal: a fused residual add with a bias");
  if (quant_glu_out && (M != 1 || q.parts.size() != 1 || bias || glu || add_residual))
    throw Error("internal: the GLU in the gate|up epilogue outside a one-token, one-part pass");
  // rows per launch: as many as quant_gemv stages within its shared memory (a wide K, e.g. an
  // FFN of 14336, takes fewer than 8); every row's rstd and residual add are its own, so slices
  // compute the same values
  int rows = M;
  while (rows > 1 && fk::quant_gemv_shared_bytes(rows, q.K) > fk::kQuantGemvMaxSharedBytes)
    rows = (rows + 1) / 2;
  const int ldx = glu ? 2 * q.K : q.K;
  for (int r0 = 0; r0 < M; r0 += rows) {
    const int m = std::min(rows, M - r0);
    for (const QuantPart& part : q.parts) {
      fk::QuantGemvArgs a;
      a.type = part.type, a.dt = dt, a.M = m, a.N = part.N, a.K = q.K;
      a.x = static_cast<const char*>(x) + size_t(r0) * ldx * (glu ? 4 : 2);
      a.ldx = ldx, a.x_glu = glu, a.glu_kind = glu_kind(), a.gain = gain, a.w = part.w.get();
      a.y = static_cast<float*>(out.y) + size_t(r0) * ldy + part.n0, a.ldy = ldy;
      a.scale_rows = rstd && part.scaled, a.eps = cfg.eps, a.pdl = opt.launch.pdl;
      if (quant_glu_out) a.glu_out = quant_glu_out, a.y = nullptr;
      if (add_residual) {  // x32 += the result, xb = round(x32)
        a.y = ws.x32.as<float>() + size_t(r0) * d.H + part.n0, a.ldy = d.H, a.accumulate = true;
        a.y_rounded = static_cast<char*>(ws.xb.get()) + (size_t(r0) * d.H + part.n0) * 2;
      }
      ok(fk::quant_gemv(a, s));
    }
  }
  if (bias) ok(fk::add_bias(dt, M, q.N, static_cast<float*>(out.y), ldy, bias, s, opt.launch.pdl));
}

const void* Forward::expand(const QuantProj& q, const float* gain) {
  for (const QuantPart& part : q.parts) {
    fk::QuantDequantArgs a;
    a.type = part.type, a.dt = dt, a.N = part.N, a.K = q.K, a.w = part.w.get(), a.gain = gain;
    a.y = static_cast<char*>(ws.wtile.get()) + size_t(part.n0) * q.K * 2, a.ldy = q.K;
    ok(fk::quant_dequantize(a, s));
  }
  return ws.wtile.get();
}

// x32 += sublayer output (post-norm for Gemma); xb = round(x32). With StandardNorm::kFusedAdd
// (Standard mode) also xn = RMSNorm(x32) * next_gain, the input of the next normed projection; in a
// norm_in_add pass xn = RMSNorm(x32) (times next_gain where the consumer keeps it: a tied head in
// FlashNorm mode, native weights).
void Forward::residual(int T, const DeviceBuffer& post, bool has_post, const void* next_gain,
                       bool next_folded) {
  const bool std_fuse = mode == NormMode::Standard && opt.standard == StandardNorm::kFusedAdd;
  const bool fuse = std_fuse || norm_in_add;
  const void* g = fuse && (std_fuse || !next_folded) ? next_gain : nullptr;
  prof.op(fuse ? kNorm : kOther, s, [&] {
    ok(fk::residual_add(dt, T, d.H, ws.proj.as<float>(), has_post ? post.as<float>() : nullptr,
                        cfg.eps, ws.x32.as<float>(), ws.xb.get(), s, g,
                        fuse ? ws.xn.get() : nullptr, opt.launch.pdl));
  });
  xn_ready = fuse;
}

// Layer l of a pass of T tokens: attention block, then the feed-forward block.
void Forward::layer(int l, int T) {
  const DeviceWeights::Layer& ly = w.layers[l];
  const bool fuse_ops = opt.launch.fuse_decode_ops, pdl = opt.launch.pdl;
  normed(
      NormIn{.M = T,
             .gain = ly.attn_gain.get(),
             .gain32 = &ly.attn_gain32,
             .mask = w.qkv_masked ? w.qkv_mask.as<uint8_t>() : nullptr,
             .all_unscaled = w.qkv_all_unscaled},
      ProjWeights{.w = ly.wqkv.get(), .N = d.nqkv, .K = d.H, .bias = ly.bqkv.get(), .q = &ly.qqkv},
      ProjOut{.y = ws.qkv.get(), .y_f32 = true});
  fk::RopeKvArgs ra;
  ra.dt = dt, ra.T = T, ra.n_head = cfg.n_head, ra.n_head_kv = cfg.n_head_kv, ra.D = d.D;
  ra.max_ctx = d.max_ctx, ra.qkv = ws.qkv.as<float>(), ra.ldqkv = d.nqkv;
  ra.pos = ws.d_pos.as<int32_t>();
  ra.cos = (ly.local ? w.cos_l : w.cos_g).as<float>();
  ra.sin = (ly.local ? w.sin_l : w.sin_g).as<float>();
  ra.neox = cfg.rope == RopeLayout::Neox;
  ra.q_norm = ly.has_q_norm ? ly.q_norm.as<float>() : nullptr;
  ra.k_norm = ly.has_k_norm ? ly.k_norm.as<float>() : nullptr;
  ra.v_renorm = ly.v_renorm, ra.eps = cfg.eps, ra.q = ws.q.as<float>();
  // this layer's slot 0 (batched: decode_attention adds each row's slot), or the pass's slot
  const size_t cache_row = (size_t(l) * d.slots + (pass.batched ? 0 : pass.slot)) * d.max_ctx;
  ra.k_cache = ws.kc.as<float>() + cache_row * d.nkv;
  ra.v_cache = ws.vc.as<float>() + cache_row * d.nkv;
  ra.pdl = pdl;
  if (pass.batched)
    ra.seq_pos = ws.d_seq_pos.as<int32_t>(), ra.seq_slot = ws.d_seq_slot.as<int32_t>();
  fk::AttentionArgs aa;
  aa.dt = dt, aa.T = T, aa.n_head = cfg.n_head, aa.n_head_kv = cfg.n_head_kv, aa.D = d.D;
  aa.max_ctx = d.max_ctx, aa.window = ly.local ? cfg.sliding_window : 0;
  aa.scale = cfg.attn_scale, aa.pos = ws.d_pos.as<int32_t>(), aa.q = ws.q.as<float>();
  aa.k_cache = ra.k_cache, aa.v_cache = ra.v_cache, aa.out = ws.att.get(), aa.pdl = pdl;
  aa.key_bound = key_bound;
  aa.ctas_per_sm = opt.launch.attention_ctas_per_sm;
  aa.late_trigger = opt.launch.attention_late_trigger;
  // a batched pass has no unfused form: decode_attention whatever fuse_decode_ops
  const bool split = T <= kSplitMaxT || pass.batched;
  if (split) aa.split_keys = split_keys(d.D), aa.partials = ws.partials.as<float>();
  if (pass.batched || (split && fuse_ops)) {  // one kernel (engine_ops.h)
    prof.op(kAttn, s,
            [&] { ok(fk::decode_attention(ra, aa, ws.attn_counters.as<unsigned>(), s)); });
  } else {
    prof.op(kAttn, s, [&] { ok(fk::rope_kv(ra, s)); });
    prof.op(kAttn, s, [&] { ok(fk::attention(aa, s)); });
  }
  // quantized o / down: quant_gemv's epilogue (no bias there) up to kQuantGemvMaxM tokens
  const bool quant_res = (ly.qo.empty() && ly.qdown.empty()) ||
                         (T <= kQuantGemvMaxM && !ly.bo.get() && !ly.bdown.get());
  const bool fuse_res = fuse_ops && decode_path(T) && !ly.has_post && quant_res &&
                        !(mode == NormMode::Standard && opt.standard == StandardNorm::kFusedAdd);
  prof.op(kOtherProj, s, [&] {
    plain(ws.att.get(), T,
          ProjWeights{.w = ly.wo.get(), .N = d.H, .K = d.nq, .bias = ly.bo.get(), .q = &ly.qo},
          ProjOut{.y = ws.proj.get(), .y_f32 = true, .add_residual = fuse_res});
  });
  // next_folded: the next normed projection's gain is in its W (bf16 weights in FlashNorm mode),
  // not for native weights, whose gain an in-add pass applies to xn (normed())
  if (!fuse_res) residual(T, ly.post_attn, ly.has_post, ly.ffn_gain.get(), ly.qgu.empty());
  // CudaLaunch::quant_glu_out: gate|up writes the GLU into ws.act (its quant_gemv's epilogue)
  const bool glu_out = glu_in_gate_up(T, ly);
  {
    struct Unset {  // also when normed() throws
      void*& p;
      ~Unset() { p = nullptr; }
    } unset{quant_glu_out};
    if (glu_out) quant_glu_out = ws.act.get();
    normed(
        NormIn{.M = T, .gain = ly.ffn_gain.get(), .gain32 = &ly.ffn_gain32},
        ProjWeights{.w = ly.wgu.get(), .N = 2 * d.F, .K = d.H, .bias = ly.bgu.get(), .q = &ly.qgu},
        ProjOut{.y = ws.gu.get(), .y_f32 = true});
  }
  const bool fuse_glu = glu_in_down(T) && !glu_out;
  if (!fuse_glu && !glu_out) {
    prof.op(kOther, s,
            [&] { ok(fk::glu(dt, glu_kind(), T, d.F, ws.gu.as<float>(), ws.act.get(), s, pdl)); });
  }
  prof.op(kOtherProj, s, [&] {
    plain(fuse_glu ? ws.gu.get() : ws.act.get(), T,
          ProjWeights{
              .w = ly.wdown.get(), .N = d.H, .K = d.F, .bias = ly.bdown.get(), .q = &ly.qdown},
          ProjOut{.y = ws.proj.get(), .y_f32 = true, .add_residual = fuse_res, .glu = fuse_glu});
  });
  if (!fuse_res) {
    const bool last = l + 1 == d.L;  // the next norm is the final one, a tied head keeps it
    residual(T, ly.post_ffn, ly.has_post, last ? w.out_gain.get() : w.layers[l + 1].attn_gain.get(),
             last ? !w.head_is_emb && w.qhead.empty() : w.layers[l + 1].qqkv.empty());
  }
}

void Forward::run(int T, int rows, bool sample, float temperature, uint64_t seed, int bound,
                  Pass p) {
  xn_ready = false, head_call = false;  // never carried over from a pass that threw
  key_bound = bound, pass = p;
  if (p.batched && (rows != T || T > fk::kDecodeAttentionMaxBatch || (sample && temperature != 0)))
    throw Error("internal: a batched pass takes every row's logits, at most 64 rows, greedy");
  norm_in_add = mode == NormMode::FlashNorm && opt.flashnorm.prefill == PrefillNorm::kInAdd &&
                (T > kDeferredMaxT ||
                 (p.batched && opt.flashnorm.batched_in_add && T > opt.launch.decode_max_rows));
  prof.op(kOther, s, [&] {
    ok(fk::embed_tokens(dt, T, d.H, d.V, ws.d_tokens.as<int32_t>(), w.emb.get(), d.emb_scale,
                        ws.x32.as<float>(), ws.xb.get(), s, opt.launch.pdl));
  });
  // batched decode passes up to decode_max_rows rows on the decode GEMV, other passes up to 16
  const int cap = p.batched ? fk::kDecodeAttentionMaxBatch : 16;
  gemv_rows = std::min(opt.launch.decode_max_rows, cap);
  for (int l = 0; l < d.L; ++l) layer(l, T);
  if (rows > 0) {
    gemv_rows = std::min(head_gemv_rows, cap), head_call = true;
    normed(NormIn{.row0 = T - rows,
                  .M = rows,
                  .gain = w.out_gain.get(),
                  .gain32 = &w.out_gain32,
                  .keep_gain = w.head_is_emb},
           ProjWeights{
               .w = w.head_is_emb ? w.emb.get() : w.head.get(), .N = d.V, .K = d.H, .q = &w.qhead},
           ProjOut{.y = ws.logits.get(), .ldy = d.ldv, .y_f32 = true});
    head_call = false;
    if (cfg.final_softcap > 0) {  // Gemma 3's final logit soft-capping, before the sampler
      prof.op(kOther, s, [&] {
        ok(fk::softcap_logits(rows, d.V, ws.logits.as<float>(), d.ldv, cfg.final_softcap, s,
                              opt.launch.pdl));
      });
    }
  }
  xn_ready = false;
  if (sample && p.batched) {
    prof.op(kOther, s, [&] {
      ok(fk::argmax_rows(T, d.V, ws.logits.as<float>(), d.ldv, ws.d_tokens.as<int32_t>(),
                         ws.d_seq_pos.as<int32_t>(), s, opt.launch.pdl));
    });
  } else if (sample) {
    prof.op(kOther, s, [&] {
      ok(fk::sample_tokens(d.V, ws.logits.as<float>() + size_t(rows - 1) * d.ldv, temperature, seed,
                           ws.d_pos.as<int32_t>(), 1, ws.d_tokens.as<int32_t>(),
                           ws.d_history.as<int32_t>(), d.max_ctx + 1, ws.sample_ws.get(), s,
                           opt.launch.pdl));
    });
  }
}

}  // namespace flashnorm::cuda_engine
