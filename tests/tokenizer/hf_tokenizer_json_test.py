#!/usr/bin/env python3
"""Hugging Face tokenizer.json support (tokenizer_from_hf_dir) against the `tokenizers` library.

Three small tokenizers are trained here by `tokenizers` itself (BpeTrainer on the GPL-3 text plus
the test strings) and given the pipeline configuration the real models ship (from transformers'
converters and the published files: Llama 3's and Qwen 2.5's Split regexes, ByteLevel, NFC,
ignore_merges, TemplateProcessing; Gemma's Replace " " -> "▁" normalizer, Split(" ",
MergedWithPrevious), byte fallback, Replace/ByteFallback/Fuse decoder; a Llama 2 / Mistral variant
with Prepend "▁" and Strip, and a Mistral v0.3 one with Metaspace; a byte-level one with every Split
behaviour we implement). For each, every test string must encode to the ids `tokenizers` gives
(encode(text, add_special_tokens=False)), with special-token parsing on and off (HF
encode_special_tokens), our decode of those ids must be `tokenizers`' decode
(skip_special_tokens=False), and bos/eos/add_bos and the token a template appends must agree
with what `tokenizers` adds.
Negative controls: the same comparison with one setting changed in our copy only must fail.
Refusals: unsupported or malformed settings give exit 1 and one line naming the field; 60 random
mutants of one file load or give one line, never a crash.

Exit 77 (ctest: skipped) only when python3 lacks `tokenizers`.
Usage: hf_tokenizer_json_test.py --tool HF_TOKENIZE
"""
import argparse
import copy
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tokenizers
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
except ImportError:
    print("skipped: python3 has no `tokenizers` package")
    sys.exit(77)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_common as rc  # noqa: E402  (the shared test strings)

# Published pre-tokenizer regexes (meta-llama/Meta-Llama-3-8B tokenizer.json; transformers
# Qwen2Converter / tokenization_qwen2.PRETOKENIZE_REGEX).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CASES = (rc.ASCII_CASES + rc.DIGIT_CASES + rc.WHITESPACE_CASES_TAIL + rc.SCRIPT_CASES
         + rc.EMOJI_CASES + [rc.MATH_CASE] + rc.CODE_CASES_HEAD + rc.CODE_CASES_TAIL
         + rc.LONG_CASES + [
             # whitespace runs
             "  two leading spaces", "trailing spaces   ", "   ", "tab\there", "\t\tdouble tab",
             "line1\nline2", "para1\n\npara2", "many\n\n\n\nnewlines\n", " \n \n\n  x",
             # contractions, case-insensitive in the Llama 3 / Qwen regexes
             "I'm sure you'll see it's what they'd've wanted", "DON'T SHOUT, IT'S LOUD, WE'LL",
             "rock 'n' roll", "don\u2019t",
             # digits: groups of three (Llama 3), one by one (Qwen)
             "1234567", "x=12345678901", " 2024-12-02 ",
             # NFC: decomposed forms compose (Qwen normalizes, the others do not)
             "A\u030angstr\u00f6m e\u0301 \u1100\u1161 \u212b", "\u0041\u0308\u0304",
             # CJK and emoji runs
             "\u4e2d\u6587\u5b57\u7b26\u4e32\u6d4b\u8bd5\u3002\u6570\u5b57123\u548c\u7a7a\u683c ",
             "\U0001F600\U0001F600\U0001F600 \U0001F9D1\u200D\U0001F4BB",
             # the SentencePiece space marker typed literally
             "\u2581already\u2581marked \u2581",
             # added tokens (each test tokenizer has its own; the others see plain text)
             "<|begin_of_text|>Hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHello",
             "<|im_start|>user\nHi there<|im_end|>\n", "text<|endoftext|>more",
             "<|im_start|><|im_end|><|im_start|>", "almost <|im_start and |im_end|> <|eot_id|",
             "<bos>Hi<end_of_turn>\n<start_of_turn>model\n", "<eos><pad><unk>",
             "a <0x41> b", "pre<html>post", "new york new  york New York", "new\u2581york",
             "zzqx zzqx zzqxzzqx", "a-b--c -d- e,f;;g, h#i##j #k# l- 12,345#678 -9",
             # held out of training (as every "zzqx" text): characters without a token
             "zzqx \U0001F9E9\U0001F9EA\U00010400 a\U0001F9E9b\u0d9a\U0001F9E9",
             " <|im_end|> spaces around <|im_start|> ",
         ])

RANDOM_POOL = rc.RANDOM_POOL_BASE + [
    "\U0001F600", "\u200d", "\ufe0f", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<bos>",
    "<end_of_turn>", "<html>", "new york", "zzqx", "'ll", "'RE", " the", "ing", "e\u0301",
    "\u2581", "  ", "\n\n"]


def corpus():
    """The training text: GPL-3 and the test strings, except those with "zzqx" (a word the
    tokenizers must not learn; see build_byte_level)."""
    return rc.read_gpl3().splitlines() + [c for c in CASES if "zzqx" not in c] * 3


def edit_model(tok, edit):
    """tok with its saved JSON passed through `edit` (changing the dict in place) and reloaded, so
    that tokenizers assigns the ids of tokens added afterwards."""
    d = json.loads(tok.to_str())
    edit(d)
    return Tokenizer.from_str(json.dumps(d))


def build_byte_level(regex, nfc, specials, bos, ignore_merges):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)

    def edit(d):
        d["model"]["ignore_merges"] = ignore_merges
        # a token no merge reaches: ignore_merges makes " zzqx" one token
        # (at the first free id: the trainer may leave a hole, and tokenizers numbers added
        # tokens from the vocabulary's size on)
        used = set(d["model"]["vocab"].values())
        d["model"]["vocab"]["\u0120zzqx"] = min(set(range(len(used) + 1)) - used)
    tok = edit_model(tok, edit)
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
    # a non-special added token, matched in every mode
    tok.add_tokens([AddedToken("<html>", normalized=False, special=False)])
    if bos is not None:
        post = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                             special_tokens=[(bos, tok.token_to_id(bos))])
        tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), post])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return json.loads(tok.to_str())


def with_suffix(tj, token):
    """tokenizer.json `tj` with Qwen3-Embedding's post-processor: "$A <token>" (and "$A <token> $B
    <token>" for pairs) after the ByteLevel step."""
    special = {"SpecialToken": {"id": token, "type_id": 0}}
    ids = [t["id"] for t in tj["added_tokens"] if t["content"] == token]
    tj["post_processor"] = {"type": "Sequence", "processors": [
        tj["post_processor"],
        {"type": "TemplateProcessing",
         "single": [{"Sequence": {"id": "A", "type_id": 0}}, special],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, special,
                  {"Sequence": {"id": "B", "type_id": 1}}, special],
         "special_tokens": {token: {"id": token, "ids": ids, "tokens": [token]}}}]}
    return tj


def build_spm(llama2):
    """Gemma style (llama2=False) or Llama 2 / Mistral style (llama2=True)."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=llama2))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=1200, show_progress=False, special_tokens=specials,
                                  limit_alphabet=200)
    tok.train_from_iterator(corpus(), trainer)

    def edit(d):
        vocab = d["model"]["vocab"]
        n = len(vocab)
        # byte-fallback pieces in the model vocabulary, as Gemma's; the Llama 2 variant lacks
        # 0xF0..0xFF, so that 4-byte characters become <unk> (fused per run)
        for b in range(0xF0 if llama2 else 256):
            vocab[f"<0x{b:02X}>"] = n + b
        d["model"]["byte_fallback"] = True
        d["model"]["fuse_unk"] = llama2
    tok = edit_model(tok, edit)
    # a user-defined (non-special) piece as Gemma's converter adds them, and a normalized one
    tok.add_tokens([AddedToken("<html>", normalized=False, special=False),
                    AddedToken("new york", normalized=True, special=False)])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B",
        special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    d = json.loads(tok.to_str())
    if llama2:
        d["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        d["pre_tokenizer"] = None
    else:
        d["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "},
                              "behavior": "MergedWithPrevious", "invert": False}
    dec = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
           {"type": "ByteFallback"}, {"type": "Fuse"}]
    if llama2:
        dec.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    d["decoder"] = {"type": "Sequence", "decoders": dec}
    return d


def tokenizers_list():
    """(name, tokenizer.json dict, tokenizer_config.json dict or None)."""
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                       "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_0|>"]
    llama3 = build_byte_level(LLAMA3_REGEX, False, llama3_specials, "<|begin_of_text|>", True)
    # every Split behaviour we implement and Digits in groups (ByteLevel without its regex, so that
    # the pieces reach the model as the stages leave them)
    splits = copy.deepcopy(llama3)
    splits["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext",
         "invert": False},
        {"type": "Split", "pattern": {"Regex": "[,;]+"}, "behavior": "MergedWithPrevious",
         "invert": False},
        {"type": "Split", "pattern": {"String": "#"}, "behavior": "Removed", "invert": False},
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    llama2 = build_spm(True)
    # transformers' non-legacy Llama converter (Mistral v0.3 style): no normalizer, Metaspace
    # pre-tokenizer with prepend_scheme "first"
    mistral = copy.deepcopy(llama2)
    mistral["normalizer"] = None
    mistral["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                                "prepend_scheme": "first", "split": False}
    metaspace_split = copy.deepcopy(mistral)
    metaspace_split["pre_tokenizer"].update(prepend_scheme="always", split=True)
    return [
        ("llama3", llama3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
        ("splits", splits, None),
        ("qwen2.5", build_byte_level(QWEN_REGEX, True, ["<|endoftext|>", "<|im_start|>",
                                                        "<|im_end|>"], None, False),
         {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}),
        ("gemma", build_spm(False),
         {"bos_token": "<bos>", "eos_token": {"content": "<eos>"}, "add_bos_token": True}),
        ("llama2", llama2, None),
        ("mistral", mistral, {"bos_token": "<bos>", "eos_token": "<eos>"}),
        ("metaspace-split", metaspace_split, None),
        ("qwen3-embedding", with_suffix(build_byte_level(QWEN_REGEX, True, ["<|endoftext|>"],
                                                         None, False), "<|endoftext|>"),
         {"eos_token": "<|endoftext|>"}),
    ]


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, what):
        if not ok:
            self.items.append(what)
        return ok


def write_dir(root, name, tj, config):
    d = Path(root) / name
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    if config is not None:
        (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def run_tool(tool, d, request=None, root=None):
    args = [tool, str(d)]
    if request is not None:
        req = Path(root) / "request.json"
        req.write_text(json.dumps(request), encoding="utf-8")
        args.append(str(req))
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def references(tok, texts):
    """ids with specials parsed, ids with encode_special_tokens, decoded texts (tokenizers)."""
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    tok.encode_special_tokens = True
    plain = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    tok.encode_special_tokens = False
    decoded = [tok.decode(i, skip_special_tokens=False) for i in ids + plain]
    return ids, plain, decoded


def compare(f, name, tool, d, root, texts, ref, config):
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    ids, plain, decoded = ref
    r = run_tool(tool, d, {"texts": texts, "decode": ids + plain}, root)
    if not f.check(r.returncode == 0, f"{name}: tool exit {r.returncode}: {r.stderr.strip()}"):
        return 0
    out = json.loads(r.stdout)
    bad = 0
    for i, t in enumerate(texts):
        bad += not f.check(out["ids"][i] == ids[i],
                           f"{name}: encode({t!r}) = {out['ids'][i]}, tokenizers {ids[i]}")
        bad += not f.check(out["ids_plain"][i] == plain[i],
                           f"{name}: encode({t!r}, parse_special=false) = {out['ids_plain'][i]},"
                           f" tokenizers {plain[i]}")
    for i, want in enumerate(decoded):
        got = bytes(out["decoded"][i])
        bad += not f.check(got == want.encode("utf-8"),
                           f"{name}: decode({(ids + plain)[i]}) = {got!r}, tokenizers {want!r}")
    # facts: vocabulary size, bos added by tokenizers' post-processor, eos from the config
    f.check(out["vocab_size"] == tok.get_vocab_size(with_added_tokens=True),
            f"{name}: vocab_size {out['vocab_size']}, tokenizers {tok.get_vocab_size()}")
    with_bos = tok.encode("hi", add_special_tokens=True).ids
    without = tok.encode("hi", add_special_tokens=False).ids
    hf_adds_bos = with_bos[1:1 + len(without)] == without and len(with_bos) > len(without)
    f.check(out["add_bos"] == hf_adds_bos, f"{name}: add_bos {out['add_bos']}, tokenizers adds"
            f" {with_bos[:1] if hf_adds_bos else 'nothing'}")
    if hf_adds_bos:
        f.check(out["bos"] == with_bos[0], f"{name}: bos {out['bos']}, tokenizers {with_bos[0]}")
    # the token the template appends after a text (Qwen3-Embedding's "$A <|endoftext|>")
    hf_suffix = with_bos[-1] if len(with_bos) > len(without) + hf_adds_bos else None
    f.check(out["appended"] == hf_suffix,
            f"{name}: appended {out['appended']}, tokenizers appends {hf_suffix}")
    eos = (config or {}).get("eos_token")
    if isinstance(eos, dict):
        eos = eos["content"]
    f.check(out["eos"] == (tok.token_to_id(eos) if eos else None),
            f"{name}: eos {out['eos']}, config names {eos!r}")
    return bad


def negative_controls(f, tool, root, name, tj, config, texts, ref):
    """Each change, made in our copy only, must make some comparison fail. Returns how many ran."""
    changes = []
    if name == "llama3":
        changes.append(("Qwen's regex", lambda d: d["pre_tokenizer"]["pretokenizers"][0]
                        ["pattern"].update(Regex=QWEN_REGEX)))
        changes.append(("ignore_merges false", lambda d: d["model"].update(ignore_merges=False)))
        changes.append(("merges reversed", lambda d: d["model"].update(
            merges=d["model"]["merges"][::-1])))
    if name == "splits":
        for k, other in enumerate(["Isolated", "Isolated", "Isolated"]):
            def change(d, k=k, other=other):
                d["pre_tokenizer"]["pretokenizers"][k]["behavior"] = other
            changes.append((f"stage {k} {other}", change))
        changes.append(("Digits one by one", lambda d: d["pre_tokenizer"]["pretokenizers"][3]
                        .update(individual_digits=True)))
    if name == "qwen2.5":
        changes.append(("no NFC", lambda d: d.update(normalizer=None)))
    if name == "gemma":
        changes.append(("Prepend added", lambda d: d.update(normalizer={
            "type": "Sequence", "normalizers": [d["normalizer"],
                                                {"type": "Prepend", "prepend": "\u2581"}]})))
        changes.append(("new york not normalized", lambda d: [
            t.update(normalized=False) for t in d["added_tokens"] if t["content"] == "new york"]))
    if name == "mistral":
        changes.append(("prepend_scheme always", lambda d: d["pre_tokenizer"].update(
            prepend_scheme="always")))
        changes.append(("split true", lambda d: d["pre_tokenizer"].update(split=True)))
    if name == "llama2":
        changes.append(("no Strip", lambda d: d["decoder"]["decoders"].pop()))
        changes.append(("fuse_unk false", lambda d: d["model"].update(fuse_unk=False)))
    for what, change in changes:
        d = copy.deepcopy(tj)
        change(d)
        sub = write_dir(root, f"{name}-neg-{len(list(Path(root).iterdir()))}", d, config)
        g = Failures()
        compare(g, name, tool, sub, root, texts, ref, config)
        f.check(len(g.items) > 0, f"{name}: negative control '{what}' passed; it must fail")
    return len(changes)


REFUSALS = [
    # (what to change, text the one-line error must contain)
    (lambda d: d.update(normalizer={"type": "NFKC"}), "normalizer.type \"NFKC\" is not supported"),
    (lambda d: d["model"].update(type="Unigram"), "model.type \"Unigram\" is not supported"),
    (lambda d: d["model"].update(dropout=0.1), "model.dropout 0.1 is not supported"),
    # tokenizers keeps a repeated merge's last rank; refused rather than tokenized differently
    (lambda d: d["model"]["merges"].append(d["model"]["merges"][0]), "duplicate merge"),
    (lambda d: d["added_tokens"][0].update(lstrip=True), "added_tokens[0].lstrip true"),
    (lambda d: d["added_tokens"][0].update(single_word=True), "added_tokens[0].single_word"),
    (lambda d: d.update(decoder={"type": "WordPiece"}), "decoder.type"),
    (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer.type \"Whitespace\""),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(behavior="Contiguous"),
     "pre_tokenizer.pretokenizers[0].behavior \"Contiguous\""),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(invert=True), ".invert true"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True),
     "add_prefix_space true"),
    (lambda d: d.update(truncation={"max_length": 5}), "truncation"),
    (lambda d: d.update(extra_key=1), "extra_key: unknown key"),
    (lambda d: d.update(version="2.0"), "version \"2.0\" is not supported"),
    (lambda d: d["added_tokens"][0].update(id=5), "added_tokens[0].id: 5 but tokenizers gives"),
    (lambda d: d["model"].update(vocab=[]), "model.vocab: expected an object"),
    (lambda d: d["model"].update(merges=[[1, 2]]), "model.merges[0]"),
    (lambda d: d["model"].update(merges=["no_space_here"]), "model.merges[0]"),
    (lambda d: d["model"].update(merges=["a zzzz_not_a_token"]), "model.merges[0]"),
    (lambda d: d["model"]["vocab"].update(a=-1), "model.vocab[\"a\"]"),
    (lambda d: d["model"]["vocab"].update(a=0), "already"),
    (lambda d: d["post_processor"]["processors"][1].update(single=[{"Sequence": {"id": "A"}},
                                                                  {"Sequence": {"id": "A"}}]),
     "post_processor.processors[1].single"),
    (lambda d: d["post_processor"]["processors"][1].update(single=[{"Sequence": {"id": "A"}},
                                                                  {"SpecialToken": {"id": "x"}}]),
     "post_processor.processors[1].special_tokens"),
    (lambda d: d["model"].update(continuing_subword_prefix="##"),
     "model.continuing_subword_prefix"),
    (lambda d: d.update(model=None), "model: expected an object"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="(unclosed"),
     "pre_tokenizer: tokenizer: PCRE2 cannot compile pre-tokenizer stage 0 pattern at offset 9"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="\\h+"),
     "pre_tokenizer: tokenizer: \\h (Oniguruma's hex digit) is not supported"),
]


def refusals(f, tool, root, tj):
    bad_texts = [("truncated", json.dumps(tj)[:5000], "invalid JSON at byte"),
                 ("empty", "", "invalid JSON at byte"),
                 ("not an object", "[1, 2]", "expected an object"),
                 ("deep nesting", "[" * 100000 + "]" * 100000, "expected an object")]
    cases = []
    for change, expect in REFUSALS:
        d = copy.deepcopy(tj)
        change(d)
        cases.append((expect, json.dumps(d), expect))
    cases += bad_texts
    for i, (what, text, expect) in enumerate(cases):
        d = Path(root) / f"refuse-{i}"
        d.mkdir()
        (d / "tokenizer.json").write_text(text, encoding="utf-8")
        r = run_tool(tool, d)
        lines = r.stderr.strip().splitlines()
        f.check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ")
                and expect in lines[0],
                f"refusal '{what}': exit {r.returncode}, stderr {r.stderr.strip()!r}, "
                f"expected one line containing {expect!r}")
    # a bad tokenizer_config.json, and a directory without tokenizer.json
    d = write_dir(root, "bad-config", tj, {"bos_token": "<not a token>"})
    r = run_tool(tool, d)
    f.check(r.returncode == 1 and "tokenizer_config.json: bos_token" in r.stderr,
            f"bad config: exit {r.returncode}, {r.stderr.strip()!r}")
    d = write_dir(root, "empty-config", tj, None)
    (d / "tokenizer_config.json").write_text("")
    r = run_tool(tool, d)
    f.check(r.returncode == 1 and "tokenizer_config.json: invalid JSON at byte" in r.stderr,
            f"empty config: exit {r.returncode}, {r.stderr.strip()!r}")
    d = write_dir(root, "other-bos", tj, {"bos_token": "<|end_of_text|>"})
    r = run_tool(tool, d)
    f.check(r.returncode == 1 and "bos_token: token" in r.stderr and "template adds" in r.stderr,
            f"config bos other than the template's: exit {r.returncode}, {r.stderr.strip()!r}")
    (Path(root) / "dir-json" / "tokenizer.json").mkdir(parents=True)
    r = run_tool(tool, Path(root) / "dir-json")
    f.check(r.returncode == 1 and "not a regular file" in r.stderr,
            f"tokenizer.json a directory: exit {r.returncode}, {r.stderr.strip()!r}")
    r = run_tool(tool, Path(root) / "missing")
    f.check(r.returncode == 1 and "cannot open" in r.stderr,
            f"missing dir: exit {r.returncode}, {r.stderr.strip()!r}")
    return len(cases) + 5


def mutations(f, tool, root, tj, count=60, seed=7):
    """Random type/value replacements anywhere in the file: the tool loads and encodes, or exits 1
    with one line; it never crashes. Returns how many mutants loaded."""
    rng = random.Random(seed)
    values = [None, 0, -1, 2 ** 40, 1.5, "", "x", "\u2581", [], {}, True, [["a", "b"]],
              {"type": "Sequence"}, {"type": "Split"}]

    def nodes(x, path):
        yield path
        if isinstance(x, dict):
            for k, v in x.items():
                if k not in ("vocab", "merges") or rng.random() < 0.05:
                    yield from nodes(v, path + [k])
        elif isinstance(x, list):
            for i, v in enumerate(x[:8]):
                yield from nodes(v, path + [i])

    loaded = 0
    all_paths = list(nodes(tj, []))
    for i in range(count):
        d = copy.deepcopy(tj)
        path = rng.choice(all_paths[1:])
        parent = d
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = copy.deepcopy(rng.choice(values))
        sub = write_dir(root, f"mutant-{i}", d, None)
        r = run_tool(tool, sub, {"texts": ["Hello world 123", "<|eot_id|>x"], "decode": [[0, 1]]},
                     root)
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 0 or (r.returncode == 1 and len(lines) == 1)
        f.check(ok, f"mutant {path} = {parent[path[-1]]!r}: exit {r.returncode}, "
                f"stderr {r.stderr.strip()[:300]!r}")
        loaded += r.returncode == 0
    return loaded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    f = Failures()
    texts = CASES + rc.random_texts(RANDOM_POOL, 20261202, 150)
    assert len(set(texts)) > 150
    with tempfile.TemporaryDirectory() as root:
        for name, tj, config in tokenizers_list():
            d = write_dir(root, name, tj, config)
            tok = Tokenizer.from_file(str(d / "tokenizer.json"))
            ref = references(tok, texts)
            bad = compare(f, name, args.tool, d, root, texts, ref, config)
            print(f"{name}: {len(texts)} texts, {bad} disagreements with tokenizers "
                  f"{tokenizers.__version__}")
            n = negative_controls(f, args.tool, root, name, tj, config, texts, ref)
            print(f"{name}: {n} negative controls")
            if name == "llama3":
                print(f"refusals: {refusals(f, args.tool, root, tj)}")
                print(f"mutants: {mutations(f, args.tool, root, tj)} of 60 loaded, none crashed")
    for item in f.items[:40]:
        print("FAIL:", item)
    if f.items:
        print(f"{len(f.items)} failures")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
