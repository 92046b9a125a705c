"""Random Hugging Face checkpoints of the new architectures, for the CUDA engine's GPU check
(issue "On the H200 (1)", item 3): a Llama 3-shaped and a Qwen 3-shaped model, each with a
byte-level BPE tokenizer.json trained on the text given (GPL-3) by the `tokenizers` library, so
that `flashnorm verify DIR --device cuda --text GPL-3` runs on real text tokens with no flag.

Shapes (8 layers, hidden 1024): Llama 3 (GQA 16/4 heads, head_dim 64, intermediate 2816, rope_theta
500000 with llama3 scaling factor 8, untied head) and Qwen 3 (16/8 heads, head_dim 128, q/k norms,
intermediate 3072, rope_theta 1e6, tied head). Weights: matrices N(0, 1/K), embeddings N(0, 1),
gains U(0.5, 1.5) with 5% negated (as tests/engine/hf_transformers_test.py); stored in bf16, so the
CPU fp32 engine and the CUDA bf16 engine read the same values. Vocabulary: 4096 rows (the trained
tokenizer names fewer ids; the rest are padding, as in Qwen's embeddings).
  python3 bench/random_hf_models.py OUT_DIR TEXT_FILE
"""
import sys
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from random_hf import randomize_  # noqa: E402  (the tests' random weights)

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 4096
COMMON = dict(vocab_size=VOCAB, hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
              max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def tokenizer(text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 8, show_progress=False,
                                  special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer)
    return tok


def build(cls, cfg, seed, out, tok):
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    randomize_(model, seed + 1)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save(str(Path(out) / "tokenizer.json"))
    (Path(out) / "tokenizer_config.json").write_text(
        '{"bos_token": null, "eos_token": "</s>", "add_bos_token": false}')


def main():
    out, text = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
    tok = tokenizer(text)
    build(LlamaForCausalLM, LlamaConfig(**COMMON, num_key_value_heads=4, head_dim=64,
                                        intermediate_size=2816, rms_norm_eps=1e-5,
                                        tie_word_embeddings=False,
                                        rope_parameters={"rope_type": "llama3",
                                                         "rope_theta": 500000.0, "factor": 8.0,
                                                         "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 8192}),
          7, out / "llama3", tok)
    build(Qwen3ForCausalLM, Qwen3Config(**COMMON, num_key_value_heads=8, head_dim=128,
                                        intermediate_size=3072, rms_norm_eps=1e-6,
                                        tie_word_embeddings=True,
                                        rope_parameters={"rope_type": "default",
                                                         "rope_theta": 1000000.0}),
          8, out / "qwen3", tok)
    print(f"tokenizer: {tok.get_vocab_size()} ids; models in {out}")


if __name__ == "__main__":
    main()
