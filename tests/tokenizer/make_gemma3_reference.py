#!/usr/bin/env python3
"""Writes tests/tokenizer/data/gemma3_reference.json: token ids for Gemma 3 produced by an outside
implementation, Google's `sentencepiece` (C++ library, Python bindings), plus chat prompts rendered
from Gemma 3's published Jinja chat template by `jinja2`.

The sentencepiece model is a ModelProto assembled from the GGUF vocabulary (read with the `gguf`
package, not with flashnorm), set up as Gemma 3's own tokenizer.model is:
  trainer_spec    model_type BPE, byte_fallback true, unk 3 / bos 2 / eos 1 / pad 0
  normalizer_spec name "identity" (no precompiled charsmap), add_dummy_prefix false,
                  remove_extra_whitespaces false, escape_whitespaces true (" " -> U+2581)
  pieces          the GGUF tokens in id order with their scores; GGUF token types map 1:1 onto
                  sentencepiece piece types (1 normal, 2 unknown, 3 control, 4 user-defined,
                  5 unused, 6 byte), except that <unk> (id 3) is UNKNOWN (sentencepiece needs one).
                  llama.cpp's converter wrote user-defined pieces with U+2581 replaced by " " (the
                  runs of 2..31 spaces); they are turned back into U+2581 here, as they are in the
                  tokenizer.model (sentencepiece matches user-defined pieces after escaping spaces).
Two processors are built from that proto:
  plain    GGUF control tokens stay CONTROL: sentencepiece never matches them in text. This is
           flashnorm's encode(text, parse_special=false).
  special  GGUF control tokens except <unk> become USER_DEFINED, so sentencepiece matches them
           verbatim (leftmost, longest), as Hugging Face's Gemma tokenizer and llama.cpp do with
           special-token parsing on. This is flashnorm's encode(text, parse_special=true). Texts
           containing the literal "<unk>" are not used with it (sentencepiece needs <unk> UNKNOWN).
A third proto (add_dummy_prefix true) gives reference ids for vocabularies whose
tokenizer.ggml.add_space_prefix is true.

The chat template is the one in google/gemma-3-4b-it's tokenizer_config.json (Gemma 3 instruction
tuned models share it). The 270M GGUF used here is the pre-trained model and has no
tokenizer.chat_template key.

Usage (this exact command produced the checked-in JSON):
  pip install gguf==0.19.0 sentencepiece==0.2.3 protobuf==7.36.2 jinja2==3.1.6
  python3 tests/tokenizer/make_gemma3_reference.py \
      /root/.cache/flashnorm/models/gemma3/gemma-3-270m-q4_k_m.gguf \
      tests/tokenizer/data/gemma3_reference.json
"""

import sys

import gguf
import jinja2
import sentencepiece
from sentencepiece import sentencepiece_model_pb2 as sp_pb2

import reference_common as rc

SPACE = "\u2581"

CASES = (
    rc.ASCII_CASES
    + ["I'm sure you'll see it's what they'd've wanted"]
    + rc.DIGIT_CASES
    + [
        # whitespace runs (runs of 2..31 spaces, tabs and newlines are user-defined pieces)
        "  two leading spaces",
        "trailing spaces   ",
        "   ",
        " " * 31,
        " " * 32,
        " " * 70 + "x",
        "tab\there",
        "\t\tdouble tab",
        "\t" * 40,
        "line1\nline2",
        "para1\n\npara2",
        "many\n\n\n\nnewlines\n",
        "\n" * 35,
    ]
    + rc.WHITESPACE_CASES_TAIL
    + ["literal \u2581 lower block and \u2581\u2581 two, \u2581 \u2581 mixed"]
    + rc.SCRIPT_CASES
    + ["\u0aa7\u0acd\u0ab0\u0ac1\u0ab5"]
    + rc.EMOJI_CASES
    + ["\U0001FAE9 \U0001F972 \U0001FA75", rc.MATH_CASE]
    # characters without a piece: byte fallback (filled in below from the vocabulary)
    + rc.CODE_CASES_HEAD
    + ["<table><tr><td>1</td></tr></table> <b>bold</b> <div>x</div>"]
    + rc.CODE_CASES_TAIL
    + [
        # control tokens inside text
        "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
        "<start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model",
        "text<eos>more text<bos>x<pad>",
        "<start_of_turn><end_of_turn><start_of_turn>",
        "almost special <start_of_turn and end_of_turn> and <end_of_turn >",
        " <end_of_turn> spaces around <start_of_turn> ",
        "<unused0> <unused10> <unused6241><unused62410> <mask> [multimodal]",
        "<start_of_image><end_of_image>",
        "byte tokens as text: <0x41> <0xFF> <0x00>",
    ]
    + rc.LONG_CASES
)

NO_SPECIAL_CASES = [
    "<start_of_turn>user\nHi<end_of_turn>",
    "a<eos>b<bos>c",
    "<unused0> and <mask>",
    "\n\n<b>still user-defined</b>  \t",
]

# Random strings (fixed seed) mixing the classes that matter for this tokenizer: spaces (and their
# user-defined runs), tabs/newlines, control tokens, user-defined tags, rare characters that need
# byte fallback.
RANDOM_POOL = rc.RANDOM_POOL_BASE + [
    SPACE, "\U0001F600", "\u200d", "\ufe0f", "\U0001F44D", "\U0001F3FD", "\U0001FAE9",
    "<start_of_turn>", "<end_of_turn>", "<eos>", "<unused7>", "<b>", "</div>", " the", "ing", "   ",
    "\n\n"]
RANDOM_COUNT = 300
RANDOM_SEED = 20250301

DUMMY_PREFIX_CASES = ["Hello world", " leading", "", "a  b", "\u4f60\u597d", "x\n y"]

# google/gemma-3-4b-it tokenizer_config.json "chat_template" (Gemma 3 instruction-tuned models).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)

CHAT_CASES = rc.CHAT_CASES + [
    {"user": "  padded user text \n", "system": "  system kept as is \n"},
    # Jinja's trim is Python's str.strip(): Unicode spaces and the \x1c..\x1f separators go too.
    {"user": "\u00a0\u3000 unicode padded\u2028\u0085\x1c\x1f\u202f", "system": None},
    {"user": "\u200b zero width is not a space \u200b", "system": None},
]


def field_scalar(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode("utf-8")
    return v[0].item()


def build_proto(tokens, scores, types, controls_user_defined, add_dummy_prefix=False):
    m = sp_pb2.ModelProto()
    ts = m.trainer_spec
    ts.model_type = sp_pb2.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = 3, 2, 1, 0
    ts.unk_piece, ts.bos_piece, ts.eos_piece, ts.pad_piece = "<unk>", "<bos>", "<eos>", "<pad>"
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = add_dummy_prefix
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    P = sp_pb2.ModelProto.SentencePiece
    for i, (text, score, ty) in enumerate(zip(tokens, scores, types)):
        p = m.pieces.add()
        p.score = score
        if i == 3:
            assert text == "<unk>"
            p.piece, p.type = text, P.UNKNOWN
        elif ty == 4:
            p.piece, p.type = text.replace(" ", SPACE), P.USER_DEFINED
        elif ty == 3:
            p.piece = text
            p.type = P.USER_DEFINED if controls_user_defined else P.CONTROL
        else:
            assert ty in (1, 6), (i, ty)
            p.piece, p.type = text, ty
    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    assert sp.get_piece_size() == len(tokens)
    return sp


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(gguf_path)
    tokens = rc.field_strings(reader, "tokenizer.ggml.tokens")
    scores = rc.field_numbers(reader, "tokenizer.ggml.scores", float)
    types = rc.field_numbers(reader, "tokenizer.ggml.token_type", int)
    assert field_scalar(reader, "tokenizer.ggml.model") == "llama"
    assert field_scalar(reader, "tokenizer.ggml.add_space_prefix") is False
    assert field_scalar(reader, "tokenizer.ggml.add_bos_token") is True
    assert field_scalar(reader, "tokenizer.ggml.bos_token_id") == 2
    assert field_scalar(reader, "tokenizer.ggml.eos_token_id") == 1
    assert "tokenizer.chat_template" not in reader.fields

    sp_plain = build_proto(tokens, scores, types, controls_user_defined=False)
    sp_special = build_proto(tokens, scores, types, controls_user_defined=True)
    sp_prefix = build_proto(tokens, scores, types, controls_user_defined=False,
                            add_dummy_prefix=True)

    def encode(text, special=True):
        if special:
            assert "<unk>" not in text
            return sp_special.encode(text)
        return sp_plain.encode(text)

    # Characters with no piece of their own (byte fallback), from the vocabulary itself.
    vocab = set(tokens)
    rare = [chr(c) for c in list(range(0x1FAE0, 0x1FB00)) + list(range(0x10400, 0x10500))
            if chr(c) not in vocab][:12]
    assert len(rare) >= 6
    cases_text = CASES + ["byte fallback: " + " ".join(rare), "".join(rare[:4]) + "abc",
                          "\x00\x01\x02"]

    cases = []
    for text in cases_text:
        ids = encode(text)
        cases.append({"text": text, "ids": ids, "decoded": sp_special.decode(ids)})
    random_cases = [{"text": t, "ids": encode(t)}
                    for t in rc.random_texts(RANDOM_POOL + rare[:3], RANDOM_SEED, RANDOM_COUNT)]
    no_special = [{"text": t, "ids": encode(t, special=False)}
                  for t in NO_SPECIAL_CASES + [c for c in cases_text if "<" in c]]
    dummy_prefix = [{"text": t, "ids": sp_prefix.encode(t), "decoded": sp_prefix.decode(sp_prefix.encode(t))}
                    for t in DUMMY_PREFIX_CASES]

    gpl3 = rc.read_gpl3()

    chats = []
    for (c, prompt), (_, with_bos) in zip(
            rc.render_chats(GEMMA3_CHAT_TEMPLATE, CHAT_CASES, bos_token=""),
            rc.render_chats(GEMMA3_CHAT_TEMPLATE, CHAT_CASES, bos_token="<bos>")):
        assert with_bos == "<bos>" + prompt
        chats.append({"user": c["user"], "system": c["system"], "prompt": prompt,
                      "ids_with_bos": [2] + encode(prompt)})

    gpl3_ids = encode(gpl3)
    rc.write_reference(
        out_path, "tests/tokenizer/make_gemma3_reference.py",
        {"sentencepiece_version": sentencepiece.__version__, "jinja2_version": jinja2.__version__},
        cases, random_cases, no_special,
        {"dummy_prefix_cases": dummy_prefix, "byte_fallback_chars": rare,
         "gpl3": {"text": gpl3, "ids": gpl3_ids}, "chat_template": GEMMA3_CHAT_TEMPLATE,
         "chat": chats})
    print(f"{len(cases)} cases, {len(random_cases)} random, {len(no_special)} no-special, "
          f"gpl3 {len(gpl3_ids)} ids, {len(chats)} chats")


if __name__ == "__main__":
    main()
