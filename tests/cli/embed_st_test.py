"""`flashnorm embed` against sentence-transformers (the reference outside the product) on random
checkpoints of the three decoder embedders' shapes, each written by transformers and
sentence-transformers (seeded, every gain randomized, fp32) beside a tokenizer.json trained by the
`tokenizers` library:
  * Qwen3-Embedding: Qwen3Model (causal, QK-norm), a tokenizer.json template that appends
    <|endoftext|> to every text (the row last-token pooling reads), Normalize, a query prompt
    (--prompt-name query against encode(prompt_name="query"));
  * EmbeddingGemma: Gemma3TextModel with use_bidirectional_attention (a sliding window shorter
    than most inputs), mean pooling, Dense h -> 2h -> h/2 without bias, Normalize, Matryoshka
    (--dimensions 8 against encode(truncate_dim=8, normalize_embeddings=True));
  * gte-Qwen2: Qwen2Model (q|k|v bias) with is_causal false in config.json, last-token pooling, a
    Dense with bias and Tanh, Normalize. transformers' Qwen2 is always causal, so the reference
    runs it bidirectionally as gte-Qwen2's own modeling code does (every attention's is_causal
    off, create_bidirectional_mask for the mask).
For 64 texts of 1 to 40 words, in both norm modes, on the directory and on its `flashnorm fold`
output (which sentence-transformers must load to the same embeddings too): cosine similarity >=
0.99999 against SentenceTransformer.encode of the original for every text, and the same top-1
neighbour of every text.
Negative controls, which must fail the same bar: pooling from the wrong row (cls for lasttoken),
the Dense layers left out of modules.json, the template's appended token left out, the causal
attention of a bidirectional model
(is_causal true), and a folded directory that lost the final gain (the unfolded Dense beside it,
or the final norm set to its identity). Refusals, one line naming the field, exit 1: a combined pooling mode, a Dense
with use_residual, an unknown module, --dimensions above the model's, a directory without
modules.json, and `generate` on a model without an LM head.
`flashnorm serve` with the three models and their folded directories (and SmolLM2 as a completion
model): POST /v1/embeddings
through the `openai` client, float and base64, in both norm modes, against the same reference;
bad requests (an empty input list, an empty string, a 10 MB input, an input past max_seq_length, dimensions above the model's,
a completion model, an unknown field; completions from an embedding model) get a 4xx naming
the field, and the server keeps serving.
Usage: embed_st_test.py --cli FLASHNORM [--write-for-vllm DIR]
"""
import argparse
import base64
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent / "engine"))
sys.path.insert(0, str(here.parent / "tokenizer"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from sentence_transformers import SentenceTransformer, models  # noqa: E402
from transformers import Gemma3TextModel, Qwen2Model, Qwen3Model  # noqa: E402
from transformers import masking_utils  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402

import hf_tokenizer_json_test as htj  # noqa: E402  (trained tokenizer.json files)
import hf_transformers_test as hft  # noqa: E402  (random checkpoints)

COS_BAR = 0.99999
WORDS = ("the license grants you freedom to run study share and change program software source "
         "code copy distribute modified versions under terms of this public general work any "
         "person receiving gnu free foundation protect users rights warranty notice").split()


def texts(n=64, seed=5):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randint(1, 40)
        out.append(" ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + rng.choice(".?!"))
    out[3] = "Ünïcode — ça marche, 東京."
    out[5] = " ".join(WORDS * 8)  # past model_max_length (256): both cut it there
    return out


def tokenizer_files(d, suffix=False):
    """tokenizer.json (trained) and tokenizer_config.json in `d`; suffix: the template appends
    <|endoftext|> to every text, as Qwen3-Embedding's does. Returns the embedding rows."""
    tj = htj.build_byte_level(htj.QWEN_REGEX, True, ["<|endoftext|>"], None, False)
    if suffix:
        tj = htj.with_suffix(tj, "<|endoftext|>")
    (d / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    (d / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast"}), encoding="utf-8")
    n_ids = max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"])) + 1
    return (n_ids + 63) // 64 * 64 + 64  # embedding rows, padded past the tokenizer's ids


def dense(width, out, bias, act, seed):
    d = models.Dense(width, out, bias=bias, activation_function=act)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        d.linear.weight.copy_(torch.randn(d.linear.weight.shape, generator=g) * 0.3)
        if bias:
            d.linear.bias.copy_(torch.randn(d.linear.bias.shape, generator=g) * 0.1)
    return d


def shapes(**config):
    """(name, factory, base class, pooling, Dense layers (out, bias, activation), prompts);
    `config`: settings every config gets (e.g. a head_dim vLLM's CPU attention takes)."""
    return [
        ("qwen3_embedding", lambda **kw: hft.qwen3(**config, **kw), Qwen3Model, "lasttoken", [],
         {"query": "Instruct: find the passage\nQuery: ", "document": ""}),
        ("embeddinggemma",
         lambda **kw: hft.gemma3(use_bidirectional_attention=True, sliding_window=6, **config,
                                 **kw),
         Gemma3TextModel, "mean", [(128, False, torch.nn.Identity()),
                                   (32, False, torch.nn.Identity())], {}),
        ("gte_qwen2", lambda **kw: hft.qwen2(is_causal=False, **config, **kw), Qwen2Model,
         "lasttoken", [(64, True, torch.nn.Tanh())], {}),
    ]


def build(root, name, factory, cls, pooling, dense_specs, prompts, seed):
    hf_dir = root / f"{name}_transformer"
    hf_dir.mkdir()
    rows = tokenizer_files(hf_dir, suffix=name.startswith("qwen3_embedding"))
    torch.manual_seed(seed)
    cfg, _ = factory(vocab_size=rows)
    model = cls(cfg).eval()
    hft.randomize_(model, seed + 1)
    model.save_pretrained(hf_dir)
    mods = [models.Transformer(str(hf_dir)), models.Pooling(cfg.hidden_size, pooling_mode=pooling)]
    width = cfg.hidden_size
    for i, (out, bias, act) in enumerate(dense_specs):
        mods.append(dense(width, out, bias, act, seed + 10 + i))
        width = out
    mods.append(models.Normalize())
    st = SentenceTransformer(modules=mods, prompts=prompts or None)
    out = root / name
    st.save(str(out))
    return out


class Bidirectional:
    """transformers' Qwen2 run bidirectionally (as gte-Qwen2's modeling code runs it)."""

    def __init__(self, st):
        self.st = st

    def __enter__(self):
        self.saved = modeling_qwen2.create_causal_mask
        modeling_qwen2.create_causal_mask = masking_utils.create_bidirectional_mask
        for m in self.st.modules():
            if hasattr(m, "is_causal"):
                m.is_causal = False

    def __exit__(self, *exc):
        modeling_qwen2.create_causal_mask = self.saved


def reference(path, inputs, bidirectional_qwen2, **kw):
    st = SentenceTransformer(str(path), device="cpu")
    if bidirectional_qwen2:
        with Bidirectional(st):
            return st.encode(inputs, batch_size=16, convert_to_numpy=True, **kw)
    return st.encode(inputs, batch_size=16, convert_to_numpy=True, **kw)


def run(cli, *args, stdin=None):
    return subprocess.run([cli, *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=600)


def embed(cli, path, inputs, *extra):
    """flashnorm embed's embeddings of inputs (JSON lines in: any text, newlines included)."""
    stdin = "".join(json.dumps(t) + "\n" for t in inputs)
    r = run(cli, "embed", "-m", path, "--jsonl", *extra, stdin=stdin)
    if r.returncode != 0:
        return None, r.stderr.strip()
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["index"] for x in lines] == list(range(len(inputs)))
    return np.array([x["embedding"] for x in lines], dtype=np.float64), r.stderr.strip()


def agreement(got, ref):
    """(smallest cosine similarity, share of texts with the same top-1 neighbour)."""
    if got is None or got.shape != ref.shape:
        return -1.0, 0.0
    g = got / np.linalg.norm(got, axis=1, keepdims=True)
    r = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    cos = float((g * r).sum(1).min())

    def top1(e):
        s = e @ e.T
        np.fill_diagonal(s, -np.inf)
        return s.argmax(1)
    return cos, float((top1(g) == top1(r)).mean())


class Server:
    """`flashnorm serve` on a free loopback port (read from its "listening on" line)."""

    def __init__(self, cli, models):
        args = [cli, "serve", "--port", "0"]
        for m in models:
            args += ["--model", m]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.log, self.port = [], None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def post(self, body, path="/v1/embeddings"):
        """(status, parsed JSON) of a POST."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", path, body=body if isinstance(body, bytes) else
                  json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode("utf-8", "replace")
        c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def serve_checks(cli, root, built, check):
    """/v1/embeddings of every built model, both modes, against its reference."""
    import openai
    specs = []
    for name, (path, _) in built.items():
        specs += [f"{name}={path},norm=flashnorm", f"{name}_std={path},norm=standard"]
    smol = os.environ.get("FLASHNORM_SMOLLM2_GGUF")
    if smol and Path(smol).exists():
        specs.append(f"smol={smol}")
    server = Server(cli, specs)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none")
        full = texts()
        # the API refuses an input past the model's limit (sentence-transformers cuts it)
        keep = [i for i, t in enumerate(full) if i != 5]
        corpus = [full[i] for i in keep]
        for name, (path, ref_full) in built.items():
            ref = ref_full[keep]
            for served in (name, name + "_std"):
                r = client.embeddings.create(model=served, input=corpus)
                got = np.array([d.embedding for d in r.data])
                cos, top1 = agreement(got, ref)
                check(cos >= COS_BAR and top1 == 1.0 and r.usage.prompt_tokens > len(corpus),
                      f"serve {served}: min cosine {cos:.8f}, top-1 {top1:.3f}, "
                      f"{r.usage.prompt_tokens} prompt tokens")
            status, body = server.post({"model": name, "input": corpus[:8],
                                        "encoding_format": "base64"})
            ok = status == 200
            if ok:
                got = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
                                for d in body["data"]], dtype=np.float64)
                cos, top1 = agreement(got, ref[:8])
                ok = cos >= COS_BAR
            check(ok, f"serve {name}: base64 embeddings decode to the reference ({status})")
        name = next(iter(built))

        def refused(body, field, status=400):
            s, b = server.post(body)
            ok = s == status and isinstance(b, dict) and b["error"]["param"] == field
            check(ok, f"serve refuses with {status} naming {field}: {s} {str(b)[:160]}")

        refused({"model": name, "input": full}, "input[5]")
        refused({"model": name, "input": []}, "input")
        refused({"model": name, "input": ["fine", ""]}, "input[1]")
        refused(b'{"model": "' + name.encode() + b'", "input": "' + b"a" * (10 << 20) + b'"}',
                "input", status=413)
        refused({"model": name, "input": "x", "dimensions": 100000}, "dimensions")
        refused({"model": name, "input": "x", "truncate": True}, "truncate")
        if smol and Path(smol).exists():
            refused({"model": "smol", "input": "x"}, "model")
        s, b = server.post({"model": name, "prompt": "hello", "max_tokens": 2}, "/v1/completions")
        check(s == 400 and b["error"]["param"] == "model",
              f"serve refuses completions from an embedding model: {s} {str(b)[:160]}")
        r = client.embeddings.create(model=name, input="still serving")
        check(len(r.data) == 1, "serve keeps serving after the refusals")
    finally:
        server.stop()


# Shapes vLLM's CPU attention takes (head_dim 32), for tests/vllm/test_vllm_pooling.py
VLLM_CONFIG = {"hidden_size": 128, "intermediate_size": 192, "head_dim": 32}


def write_for_vllm(cli, root):
    """The three shapes in vLLM's sizes under `root`, each with its `flashnorm fold` copy, and
    root/reference.json: {name: {"model", "folded", "ids" (sentence-transformers' token ids per
    text, as it cuts them), "embeddings" (SentenceTransformer.encode)}}."""
    corpus, out = texts(), {}
    for seed, spec in enumerate(shapes(**VLLM_CONFIG), start=21):
        name, factory, cls, pooling, dense_specs, prompts = spec
        path = build(root, name, factory, cls, pooling, dense_specs, prompts, seed)
        folded = root / f"{name}_folded"
        r = run(cli, "fold", path, "-o", folded)
        if r.returncode != 0:
            raise RuntimeError(f"flashnorm fold {path}: {r.stderr.strip()}")
        st = SentenceTransformer(str(path), device="cpu")
        enc = st.preprocess(corpus)
        ids = [[int(t) for t, m in zip(row, mask) if m]
               for row, mask in zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist())]
        ref = reference(path, corpus, name == "gte_qwen2")
        out[name] = {"model": str(path), "folded": str(folded), "ids": ids,
                     "embeddings": ref.tolist()}
    (root / "reference.json").write_text(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--write-for-vllm", metavar="DIR",
                    help="only write the vLLM test's checkpoints and references into DIR")
    args = ap.parse_args()
    if args.write_for_vllm:
        write_for_vllm(args.cli, Path(args.write_for_vllm))
        return 0
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    corpus = texts()
    built = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for seed, spec in enumerate(shapes(), start=21):
            name, factory, cls, pooling, dense_specs, prompts = spec
            path = build(root, name, factory, cls, pooling, dense_specs, prompts, seed)
            bidi_qwen2 = name == "gte_qwen2"
            ref = reference(path, corpus, bidi_qwen2)
            built[name] = (path, ref)
            variants = [("", [], {})]
            if prompts:
                variants.append(("prompt query", ["--prompt-name", "query"],
                                 {"prompt_name": "query"}))
            if name == "embeddinggemma":
                variants.append(("dimensions 8", ["--dimensions", "8"],
                                 {"truncate_dim": 8, "normalize_embeddings": True}))
            for label, extra, kw in variants:
                want = ref if not kw else reference(path, corpus, bidi_qwen2, **kw)
                for mode in ("standard", "flashnorm"):
                    got, err = embed(args.cli, path, corpus, "--norm", mode, *extra)
                    cos, top1 = agreement(got, want)
                    check(cos >= COS_BAR and top1 == 1.0,
                          f"{name} {mode} {label}: min cosine {cos:.8f}, top-1 {top1:.3f} "
                          f"({err.splitlines()[0] if err else ''})")

            # `flashnorm fold` on the directory: the module folders copied beside the folded
            # transformer, the final gain folded into the first Dense where it folds (else kept);
            # sentence-transformers itself and both norm modes on the output against `ref`
            folded = root / f"{name}_folded"
            r = run(args.cli, "fold", path, "-o", folded)
            check(r.returncode == 0, f"{name} fold: exit {r.returncode} ({r.stderr.strip()})")
            built[f"{name}_folded"] = (folded, ref)  # served too
            cos, top1 = agreement(reference(folded, corpus, bidi_qwen2), ref)
            check(cos >= COS_BAR and top1 == 1.0,
                  f"{name} folded, SentenceTransformer.encode: min cosine {cos:.8f}, top-1 {top1:.3f}")
            for mode in ("standard", "flashnorm"):
                got, err = embed(args.cli, folded, corpus, "--norm", mode)
                cos, top1 = agreement(got, ref)
                check(cos >= COS_BAR and top1 == 1.0,
                      f"{name} folded {mode}: min cosine {cos:.8f}, top-1 {top1:.3f}")
            # its negative control: the final gain lost (the original Dense beside the folded
            # transformer; without a Dense, the final norm set to its identity as a head fold would)
            lost = root / f"{name}_folded_gain_lost"
            shutil.copytree(folded, lost)
            if dense_specs:
                shutil.copy(path / "2_Dense" / "model.safetensors", lost / "2_Dense")
            else:
                w = load_file(lost / "model.safetensors")
                w["norm.weight"] = torch.ones_like(w["norm.weight"])
                save_file(w, lost / "model.safetensors", metadata={"format": "pt"})
            got, err = embed(args.cli, lost, corpus, "--norm", "flashnorm")
            cos, top1 = agreement(got, ref)
            check(got is not None and (cos < COS_BAR or top1 < 1.0),
                  f"{name} negative control, folded with the final gain lost: min cosine "
                  f"{cos:.6f}, top-1 {top1:.3f}")

            if name == "qwen3_embedding":
                # Normalize without its folder (older sentence-transformers versions, the Hub):
                # folded all the same
                bare, bare_folded = root / f"{name}_no_normalize_dir", root / f"{name}_bare_f"
                shutil.copytree(path, bare)
                for d in bare.glob("*_Normalize"):
                    shutil.rmtree(d)
                r = run(args.cli, "fold", bare, "-o", bare_folded)
                got, _ = embed(args.cli, bare_folded, corpus) if r.returncode == 0 else (None, "")
                cos, top1 = agreement(got, ref)
                check(cos >= COS_BAR and top1 == 1.0,
                      f"{name} without a Normalize folder, folded: exit {r.returncode}, "
                      f"min cosine {cos:.8f} ({r.stderr.strip()})")
            if name == "gte_qwen2":
                # the first Dense's folder read by a second module too: the gain would apply twice
                shared, shared_out = root / "gte_shared_dense", root / "gte_shared_dense_f"
                shutil.copytree(path, shared)
                mods = json.loads((shared / "modules.json").read_text())
                mods.insert(3, {**mods[2], "idx": 3, "name": "2b"})
                (shared / "modules.json").write_text(json.dumps(mods))
                r = run(args.cli, "fold", shared, "-o", shared_out)
                check(r.returncode == 1 and "apply the gain twice" in r.stderr and
                      not shared_out.exists(),
                      f"fold refuses a Dense folder two modules read: {r.stderr.strip()!r}")

            # Negative controls: each must miss the bar.
            def control(label, edit):
                bad = root / f"{name}_{label.replace(' ', '_')}"
                shutil.copytree(path, bad)
                edit(bad)
                got, err = embed(args.cli, bad, corpus, "--norm", "flashnorm")
                cos, top1 = agreement(got, ref)
                check(got is not None and (cos < COS_BAR or top1 < 1.0),
                      f"{name} negative control, {label}: min cosine {cos:.6f}, top-1 {top1:.3f}"
                      + (f" ({err})" if got is None else ""))

            def set_json(rel, fn):
                def edit(d):
                    p = d / rel
                    j = json.loads(p.read_text())
                    p.write_text(json.dumps(fn(j)))
                return edit

            if name == "qwen3_embedding":  # its template appends <|endoftext|>, pooled last
                control("template suffix left out", set_json(
                    "tokenizer.json", lambda j: {**j, "post_processor":
                                                 j["post_processor"]["processors"][0]}))
            if pooling == "lasttoken":
                control("pooling from the first row",
                        set_json("1_Pooling/config.json", lambda j: {**j, "pooling_mode": "cls"}))
            if dense_specs:
                control("Dense skipped", set_json(
                    "modules.json", lambda j: [m for m in j if not m["type"].endswith("Dense")]))
            if bidi_qwen2:
                control("causal attention",
                        set_json("config.json", lambda j: {**j, "is_causal": True}))
            if name == "embeddinggemma":
                control("causal attention", set_json(
                    "config.json", lambda j: {**j, "use_bidirectional_attention": False}))

            # Refusals: one line naming the field, exit 1.
            def refusal(label, edit, field, *extra):
                bad = root / f"{name}_refuse_{label.replace(' ', '_')}"
                shutil.copytree(path, bad)
                edit(bad)
                r = run(args.cli, "embed", "-m", bad, *extra, stdin="a text\n")
                msg = r.stderr.strip()
                check(r.returncode == 1 and field in msg and len(msg.splitlines()) == 1,
                      f"{name} refuses {label}: exit {r.returncode}, {msg!r}")

            if name == "qwen3_embedding":
                refusal("combined pooling", set_json(
                    "1_Pooling/config.json", lambda j: {**j, "pooling_mode": ["mean", "max"]}),
                    "pooling_mode")
                refusal("an unknown module", set_json(
                    "modules.json", lambda j: j + [{"idx": 9, "name": "9", "path": "",
                                                    "type": "sentence_transformers.models.LSTM"}]),
                    "modules[")
                refusal("no modules.json", lambda d: (d / "modules.json").unlink(),
                        "modules.json")
                refusal("dimensions above the model's", lambda d: None, "dimensions",
                        "--dimensions", "65")
                r = run(args.cli, "generate", "-m", path, "-p", "hi", "-n", "2")
                check(r.returncode == 1 and "embeddings only" in r.stderr,
                      f"generate refuses a model without an LM head: {r.stderr.strip()!r}")
            if name == "gte_qwen2":
                refusal("Dense use_residual", set_json(
                    "2_Dense/config.json", lambda j: {**j, "use_residual": True}), "use_residual")
                # sentence-transformers keys modules by name: a repeated name drops one there
                refusal("a repeated module name", set_json(
                    "modules.json", lambda j: j[:3] + [{**j[3], "name": j[2]["name"]}]),
                    "modules[3].name")
                # -o onto a module file reached through a link: refused, the file intact
                linked, elsewhere = root / "linked", root / "elsewhere"
                shutil.copytree(path, linked)
                elsewhere.mkdir()
                shutil.move(linked / "2_Dense", elsewhere / "2_Dense")
                (linked / "2_Dense").symlink_to(elsewhere / "2_Dense")
                target = elsewhere / "2_Dense" / "model.safetensors"
                before = target.read_bytes()
                r = run(args.cli, "embed", "-m", linked, "-o", target, stdin="a text\n")
                check(r.returncode == 1 and "refusing to write" in r.stderr and
                      target.read_bytes() == before,
                      f"-o onto a linked module's weights refused: {r.stderr.strip()!r}")

        serve_checks(args.cli, root, built, check)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
