#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets from the real SmolLM2 and Gemma 3 GGUFs.

Real headers made small: every KV of the real file is kept with its type and value, except the
tokenizer arrays, which are cut consistently (Gemma 3: the 494 control/user-defined/byte tokens
and the first normal ones, with their scores and types; SmolLM2: the first tokens and only the
merges whose two parts and concatenation survive), so the small file still loads as a tokenizer.
Tensors keep their real names, types and leading raw bytes, with tiny shapes (one or two blocks).
Hugging Face seeds use the models' real config.json fields and tensor names (the hyperparameters
read from the GGUF metadata, as transformers writes them), as full configs and as tiny
consistent models (LlamaForCausalLM / Gemma3ForCausalLM, 1-2 layers) with one or two shards.

Usage: python3 fuzz/make_seeds.py OUT_DIR SMOLLM2.gguf GEMMA3.gguf
Writes OUT_DIR/{fuzz_gguf,fuzz_tokenizer,fuzz_safetensors,fuzz_hf_dir}/; the committed corpora
(fuzz/corpus/) are these seeds after fuzzing and `-merge=1` minimization (docs/fuzzing.md).
Requires the .venv packages gguf, numpy, safetensors.
"""
import json
import os
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from safetensors.numpy import save

DELIM = b"\n--8<--\n"  # fuzz_hf_dir.cpp's part separator
TOKEN_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


def field_value(f):
    """(value type, python value) of a GGUFReader field; arrays as (ARRAY, sub type, list)."""
    t = f.types[0]
    if t == VT.ARRAY:
        sub = f.types[1]
        if sub == VT.STRING:
            return t, sub, [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return t, sub, [f.parts[i][0].item() for i in f.data]
    if t == VT.STRING:
        return t, None, bytes(f.parts[f.data[0]]).decode("utf-8")
    return t, None, f.parts[f.data[0]][0].item()


def read_kvs(path):
    r = gguf.GGUFReader(path)
    kvs = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        kvs[k] = field_value(f)
    return r, kvs


def cut_vocab(kvs, keep_ids):
    """Keeps the tokenizer arrays' entries at `keep_ids` (sorted), remapping special ids."""
    remap = {old: new for new, old in enumerate(keep_ids)}
    out = dict(kvs)
    for k in TOKEN_KEYS:
        if k in kvs:
            t, sub, vals = kvs[k]
            out[k] = (t, sub, [vals[i] for i in keep_ids])
    for k, (t, sub, v) in kvs.items():
        if k.startswith("tokenizer.ggml.") and k.endswith("_token_id"):
            out[k] = (t, sub, remap.get(v, 0))
    if "tokenizer.ggml.merges" in kvs:
        toks = set(out["tokenizer.ggml.tokens"][2])
        t, sub, merges = kvs["tokenizer.ggml.merges"]
        kept = []
        for m in merges:
            a, _, b = m.partition(" ")
            if a in toks and b in toks and a + b in toks:
                kept.append(m)
        out["tokenizer.ggml.merges"] = (t, sub, kept)
    return out


def add_kv(w, key, t, sub, v):
    if t == VT.ARRAY:
        if sub == VT.STRING:
            w.add_key_value(key, v, VT.ARRAY, sub_type=VT.STRING) if _has_subtype(w) else \
                w.add_array(key, v)
        else:
            w.add_key_value(key, v, VT.ARRAY, sub_type=sub) if _has_subtype(w) else \
                w.add_array(key, np.array(v, dtype=_np_type(sub)).tolist())
    else:
        w.add_key_value(key, v, t)


def _has_subtype(w):
    import inspect
    return "sub_type" in inspect.signature(w.add_key_value).parameters


def _np_type(sub):
    return {VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.UINT32: np.uint32}.get(sub, np.int64)


def tiny_tensors(reader, names):
    """(name, raw uint8 [rows, row_bytes], type) for real tensors cut to one/two blocks a row."""
    out = []
    for t in reader.tensors:
        if t.name not in names:
            continue
        qt = t.tensor_type
        block, bbytes = gguf.GGML_QUANT_SIZES[qt]
        ne0 = block if block > 1 else 32
        rows = 2 if len(t.shape) > 1 else 1
        row_bytes = ne0 // block * bbytes
        raw = np.frombuffer(t.data.tobytes()[: rows * row_bytes], dtype=np.uint8)
        out.append((t.name, raw.reshape(rows, row_bytes), qt))
    return out


def write_gguf(path, arch, kvs, tensors=(), extra=None):
    w = gguf.GGUFWriter(path, arch)
    for k, (t, sub, v) in kvs.items():
        if k == "general.architecture":
            continue
        add_kv(w, k, t, sub, v)
    for k, v in (extra or {}).items():
        w.add_string(k, v)
    for name, raw, qt in tensors:
        if qt == QT.F32:
            v = raw.view(np.float32)  # [rows, ne0]; one row: a 1-D tensor, as the real norms
            w.add_tensor(name, v.reshape(-1) if raw.shape[0] == 1 else v)
        else:
            w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return os.path.getsize(path)


FUZZ_TEXTS = {
    "smollm2": "Hi <|im_start|>user\n12345 don't\tstop\xe9t\xe9 \U0001F600 <|im_end|>",
    "gemma3": "<start_of_turn>user\n  Hello,\u2581world 2024!\n<end_of_turn>\ub9ac \x00\x7f",
}


def gguf_seeds(out, smol_path, gemma_path):
    smol_r, smol = read_kvs(smol_path)
    gem_r, gem = read_kvs(gemma_path)
    d_gguf = os.path.join(out, "fuzz_gguf")
    d_tok = os.path.join(out, "fuzz_tokenizer")
    for d in (d_gguf, d_tok):
        os.makedirs(d, exist_ok=True)
    # SmolLM2: ids 0..16 are the special tokens, 17..272 the byte alphabet, then merged tokens.
    smol_small = cut_vocab(smol, list(range(400)))
    smol_tiny = cut_vocab(smol, list(range(290)))
    # Gemma 3: 0..493 control / user-defined / byte tokens, normal tokens from 494 on.
    gem_small = cut_vocab(gem, list(range(494 + 300)))
    gem_tiny = cut_vocab(gem, list(range(0, 8)) + [106] + list(range(238, 494)) +
                         list(range(494, 560)))
    smol_names = {"token_embd.weight", "output_norm.weight"} | {
        f"blk.0.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                       "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}
    gem_names = {"token_embd.weight", "output_norm.weight"} | {
        f"blk.0.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm",
                                       "attn_k_norm", "attn_output", "post_attention_norm",
                                       "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
                                       "post_ffw_norm")}
    sizes = {}
    sizes["gguf/smollm2_tiny"] = write_gguf(os.path.join(d_gguf, "smollm2_tiny.gguf"), "llama",
                                            smol_tiny, tiny_tensors(smol_r, smol_names))
    sizes["gguf/gemma3_tiny"] = write_gguf(os.path.join(d_gguf, "gemma3_tiny.gguf"), "gemma3",
                                           gem_tiny, tiny_tensors(gem_r, gem_names))
    sizes["tok/smollm2"] = write_gguf(os.path.join(d_tok, "smollm2_400.gguf"), "llama", smol_small,
                                      extra={"fuzz.text": FUZZ_TEXTS["smollm2"]})
    sizes["tok/smollm2_tiny"] = write_gguf(os.path.join(d_tok, "smollm2_290.gguf"), "llama",
                                           smol_tiny, extra={"fuzz.text": FUZZ_TEXTS["smollm2"]})
    sizes["tok/gemma3"] = write_gguf(os.path.join(d_tok, "gemma3_794.gguf"), "gemma3", gem_small,
                                     extra={"fuzz.text": FUZZ_TEXTS["gemma3"]})
    sizes["tok/gemma3_tiny"] = write_gguf(os.path.join(d_tok, "gemma3_331.gguf"), "gemma3",
                                          gem_tiny, extra={"fuzz.text": FUZZ_TEXTS["gemma3"]})
    # The real files' first 4 KiB (truncated headers: refused, but the path to the refusal counts).
    for name, path in (("smollm2", smol_path), ("gemma3", gemma_path)):
        with open(path, "rb") as f:
            head = f.read(4096)
        with open(os.path.join(d_gguf, f"{name}_head4k.gguf"), "wb") as f:
            f.write(head)
    return smol, gem, sizes


def u(kvs, key):
    return kvs[key][2]


def hf_config(kvs, arch):
    """config.json as transformers writes it for the real model (values from the GGUF)."""
    p = arch + "."
    if arch == "llama":  # SmolLM2-135M-Instruct
        return {
            "architectures": ["LlamaForCausalLM"], "attention_bias": False,
            "attention_dropout": 0.0, "bos_token_id": u(kvs, "tokenizer.ggml.bos_token_id"),
            "eos_token_id": u(kvs, "tokenizer.ggml.eos_token_id"), "hidden_act": "silu",
            "hidden_size": u(kvs, p + "embedding_length"), "initializer_range": 0.041666666666666664,
            "intermediate_size": u(kvs, p + "feed_forward_length"),
            "max_position_embeddings": u(kvs, p + "context_length"), "mlp_bias": False,
            "model_type": "llama", "num_attention_heads": u(kvs, p + "attention.head_count"),
            "num_hidden_layers": u(kvs, p + "block_count"),
            "num_key_value_heads": u(kvs, p + "attention.head_count_kv"),
            "pad_token_id": u(kvs, "tokenizer.ggml.padding_token_id"), "pretraining_tp": 1,
            "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 100000.0,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "transformers_version": "4.42.3", "use_cache": True,
            "vocab_size": len(u(kvs, "tokenizer.ggml.tokens")),
        }
    return {  # gemma-3-270m
        "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False, "attention_dropout": 0.0, "attn_logit_softcapping": None,
        "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": None,
        "head_dim": u(kvs, p + "attention.key_length"), "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": u(kvs, p + "embedding_length"), "initializer_range": 0.02,
        "intermediate_size": u(kvs, p + "feed_forward_length"),
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "max_position_embeddings": u(kvs, p + "context_length"), "model_type": "gemma3_text",
        "num_attention_heads": u(kvs, p + "attention.head_count"),
        "num_hidden_layers": u(kvs, p + "block_count"),
        "num_key_value_heads": u(kvs, p + "attention.head_count_kv"), "pad_token_id": 0,
        "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
        "rope_scaling": None, "rope_theta": 1000000.0,
        "sliding_window": u(kvs, p + "attention.sliding_window"), "torch_dtype": "bfloat16",
        "transformers_version": "4.55.0.dev0", "use_bidirectional_attention": False,
        "use_cache": True, "vocab_size": len(u(kvs, "tokenizer.ggml.tokens")),
    }


def tiny_model(arch, config, n_layer, dtype, rng):
    """A consistent tiny model: config shrunk, tensors with real HF names."""
    c = dict(config)
    gemma = arch == "gemma3"
    H, F, NH, NKV, D, V = 16, 32, 2, 1, 8, 32
    c.update(hidden_size=H, intermediate_size=F, num_attention_heads=NH, num_key_value_heads=NKV,
             num_hidden_layers=n_layer, vocab_size=V, max_position_embeddings=64)
    if gemma:
        c.update(head_dim=D, query_pre_attn_scalar=D, sliding_window=4,
                 layer_types=c["layer_types"][:n_layer])
    t = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    for L in range(n_layer):
        p = f"model.layers.{L}."
        t.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                  p + "self_attn.q_proj.weight": (NH * D, H),
                  p + "self_attn.k_proj.weight": (NKV * D, H),
                  p + "self_attn.v_proj.weight": (NKV * D, H),
                  p + "self_attn.o_proj.weight": (H, NH * D), p + "mlp.gate_proj.weight": (F, H),
                  p + "mlp.up_proj.weight": (F, H), p + "mlp.down_proj.weight": (H, F)})
        if gemma:
            t.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,),
                      p + "pre_feedforward_layernorm.weight": (H,),
                      p + "post_feedforward_layernorm.weight": (H,)})
    arrays = {}
    for name, shape in sorted(t.items()):
        v = rng.standard_normal(shape).astype(np.float32) * 0.1
        if dtype == "bf16":
            arrays[name] = (v.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits
        else:
            arrays[name] = v.astype(np.float16 if dtype == "f16" else np.float32)
    return c, arrays


def st_bytes(arrays, dtype):
    b = save(arrays, metadata={"format": "pt"})
    if dtype == "bf16":  # safetensors.numpy has no bfloat16: relabel the U16 entries
        n = int.from_bytes(b[:8], "little")
        header = b[8:8 + n].replace(b'"dtype":"U16"', b'"dtype":"BF16"')
        header += b" " * (-len(header) % 8)
        b = len(header).to_bytes(8, "little") + header + b[8 + n:]
    return b


def hf_seeds(out, smol, gem):
    d_st = os.path.join(out, "fuzz_safetensors")
    d_hf = os.path.join(out, "fuzz_hf_dir")
    for d in (d_st, d_hf):
        os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(17)
    for arch, kvs in (("llama", smol), ("gemma3", gem)):
        name = "smollm2" if arch == "llama" else "gemma3"
        config = hf_config(kvs, arch)
        cfg_real = json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"
        for n_layer, dtype in ((1, "bf16"), (2, "f16"), (1, "f32")):
            c, arrays = tiny_model(arch, config, n_layer, dtype, rng)
            cfg = json.dumps(c, indent=2, sort_keys=True).encode() + b"\n"
            single = st_bytes(arrays, dtype)
            tag = f"{name}_{n_layer}l_{dtype}"
            with open(os.path.join(d_st, tag + ".safetensors"), "wb") as f:
                f.write(single)
            # Single file: config, empty index part, model.safetensors.
            with open(os.path.join(d_hf, tag + "_single.hfdir"), "wb") as f:
                f.write(cfg + DELIM + b"" + DELIM + single)
            # Two shards with an index, as save_pretrained writes them.
            names = sorted(arrays)
            half = len(names) // 2
            shards = [{k: arrays[k] for k in names[:half]}, {k: arrays[k] for k in names[half:]}]
            blobs = [st_bytes(s, dtype) for s in shards]
            wm = {k: f"model-0000{i + 1}-of-00002.safetensors"
                  for i, s in enumerate(shards) for k in s}
            index = {"metadata": {"total_size": sum(a.nbytes for a in arrays.values())},
                     "weight_map": dict(sorted(wm.items()))}
            idx = json.dumps(index, indent=2).encode() + b"\n"
            with open(os.path.join(d_hf, tag + "_sharded.hfdir"), "wb") as f:
                f.write(cfg + DELIM + idx + DELIM + blobs[0] + DELIM + blobs[1])
        # The full-size real config with a tiny single shard (refused: shapes differ).
        c, arrays = tiny_model(arch, config, 1, "bf16", rng)
        with open(os.path.join(d_hf, f"{name}_realconfig.hfdir"), "wb") as f:
            f.write(cfg_real + DELIM + b"" + DELIM + st_bytes(arrays, "bf16"))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    out, smol_path, gemma_path = sys.argv[1:]
    smol, gem, sizes = gguf_seeds(out, smol_path, gemma_path)
    hf_seeds(out, smol, gem)
    for root, _, files in sorted(os.walk(out)):
        for f in sorted(files):
            p = os.path.join(root, f)
            print(f"{os.path.getsize(p):8d} {p}")


if __name__ == "__main__":
    main()
