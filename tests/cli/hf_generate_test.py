"""`flashnorm generate -m HF_DIR` on a Hugging Face directory with tokenizer.json and no other flag,
against `transformers` (the reference outside the product) running the same directory.

For three random checkpoints built by transformers (seeded, gains randomized, fp32), each beside a
tokenizer.json trained by the `tokenizers` library in the style of its family (Llama 3 byte-level
BPE + the Llama 3.2 chat template; Qwen 2.5 byte-level BPE with NFC + a ChatML template; Gemma
SentencePiece-style BPE with byte fallback + the Gemma template), and embeddings padded past the
tokenizer's ids (as Qwen's are):
  * plain prompts: generate's greedy continuation (both norm modes) is the text transformers'
    generate() decodes for the ids AutoTokenizer gives the prompt (BOS as its post-processor adds);
  * --chat (with and without --system): the prompt's token count and the greedy continuation
    equal transformers' for apply_chat_template(add_generation_prompt=True), which executes the
    template (flashnorm only recognises its family);
  * refusals, one line and exit 1: a template of no known family (Mistral's [INST]), a directory
    without tokenizer.json, an unknown --chat-format; `--chat-format chatml` then overrides.
Usage: hf_generate_test.py --cli FLASHNORM
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent / "engine"))
sys.path.insert(0, str(here.parent / "tokenizer"))
import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import hf_transformers_test as hft  # noqa: E402  (random checkpoints)
import hf_tokenizer_json_test as htj  # noqa: E402  (trained tokenizer.json files)
from make_chat_llama3_reference import LLAMA32  # noqa: E402  (Meta's published template)

N_NEW = 12
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
GEMMA = ("{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set prefix = "
         "messages[0]['content'] + '\\n\\n' -%}{%- set rest = messages[1:] -%}{%- else -%}"
         "{%- set prefix = '' -%}{%- set rest = messages -%}{%- endif -%}{%- for m in rest -%}"
         "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + "
         "(prefix if loop.first else '') }}{{ m['content'] | trim }}{{ '<end_of_turn>\\n' }}"
         "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}"
         "{%- endif -%}")
MISTRAL = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
           "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% endif %}{% endfor %}")


def families():
    """(name, model factory, tokenizer.json, tokenizer_config.json)."""
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                       "<|end_header_id|>", "<|eot_id|>"]
    return [
        ("llama3", hft.llama,
         htj.build_byte_level(htj.LLAMA3_REGEX, False, llama3_specials, "<|begin_of_text|>",
                              True),
         {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA32}),
        ("qwen", hft.qwen3,
         htj.build_byte_level(htj.QWEN_REGEX, True, ["<|endoftext|>", "<|im_start|>",
                                                     "<|im_end|>"], None, False),
         {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False,
          "chat_template": CHATML}),
        ("gemma", hft.gemma3, htj.build_spm(False),
         {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True,
          "chat_template": GEMMA}),
    ]


def make_dir(root, name, factory, tj, config, seed):
    d = Path(root) / name
    n_ids = max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"])) + 1
    rows = (n_ids + 63) // 64 * 64 + 64  # embeddings padded past the tokenizer's ids
    hft.build(lambda: factory(vocab_size=rows), seed, d)
    (d / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def run(cli, *args):
    """The CLI's result with stdout and stderr as text; bytes that are not UTF-8 (a random model
    emits any token) become U+FFFD, as `tokenizers`' decode writes them."""
    r = subprocess.run([cli, *map(str, args)], capture_output=True, timeout=300)
    r.stdout = r.stdout.decode("utf-8", errors="replace")
    r.stderr = r.stderr.decode("utf-8", errors="replace")
    return r


def reference_continuation(model, tok, ids):
    """transformers' greedy continuation of `ids`, stopped at the tokenizer's end tokens, as text."""
    eog = {i for i in (tok.eos_token_id,) if i is not None}
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=N_NEW, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    for k, t in enumerate(out):
        if t in eog:
            out = out[:k]
            break
    return tok.decode(out, skip_special_tokens=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as root:
        for seed, (name, factory, tj, config) in enumerate(families(), start=11):
            d = make_dir(root, name, factory, tj, config, seed)
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
            # The tokenizer files as transformers itself writes them (tokenizer_config.json with
            # its own keys, the template in chat_template.jinja).
            AutoTokenizer.from_pretrained(d).save_pretrained(d)
            tok = AutoTokenizer.from_pretrained(d)
            prompt = "The license grants you freedom"
            ids = tok(prompt)["input_ids"]
            want = reference_continuation(model, tok, ids)
            for mode in ("standard", "flashnorm"):
                r = run(args.cli, "generate", "-m", d, "-p", prompt, "-n", N_NEW, "--norm", mode)
                got = r.stdout[len(prompt):].rstrip("\n") if r.returncode == 0 else None
                check(r.returncode == 0 and r.stdout.startswith(prompt) and
                      want.startswith(got) and len(got) > 0,
                      f"{name} {mode}: plain prompt, {len(ids)} ids: got {got!r} want {want!r}"
                      + (f" (exit {r.returncode}: {r.stderr.strip()})" if r.returncode else ""))
            # None: no system message; "": an empty one, which the templates still write
            for system in (None, "", "Answer briefly."):
                msgs = ([{"role": "system", "content": system}] if system is not None else []) + \
                    [{"role": "user", "content": "  What does the license allow? "}]
                chat_ids = tok.apply_chat_template(msgs, add_generation_prompt=True,
                                                   tokenize=True, return_dict=False)
                want = reference_continuation(model, tok, chat_ids)
                extra = ["--system", system] if system is not None else []
                r = run(args.cli, "generate", "-m", d, "--chat", *extra, "-p",
                        "  What does the license allow? ", "-n", N_NEW)
                m = re.search(r"prompt: (\d+) tokens", r.stderr)
                n = int(m.group(1)) if m else -1
                got = r.stdout.rstrip("\n")
                check(r.returncode == 0 and n == len(chat_ids) and want.startswith(got),
                      f"{name} --chat system={system!r}: {n} vs {len(chat_ids)} prompt ids, "
                      f"got {got!r} want {want!r}"
                      + (f" (exit {r.returncode}: {r.stderr.strip()})" if r.returncode else ""))
            # Negative control: another family gives another prompt (token count or continuation).
            other = "chatml" if name != "qwen" else "llama3"
            r = run(args.cli, "generate", "-m", d, "--chat", "--system", system, "--chat-format",
                    other, "-p", "  What does the license allow? ", "-n", N_NEW)
            m = re.search(r"prompt: (\d+) tokens", r.stderr)
            check(r.returncode == 0 and m and (int(m.group(1)) != len(chat_ids) or
                                               r.stdout.rstrip("\n") != want),
                  f"{name}: --chat-format {other} gives another prompt ({m and m.group(1)} ids)")

        # Refusals (one line, exit 1).
        d = Path(root) / "qwen"
        (d / "chat_template.jinja").write_text(MISTRAL)  # where transformers saved the template
        r = run(args.cli, "generate", "-m", d, "--chat", "-p", "hi", "-n", 2)
        check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and
              "--chat-format" in r.stderr and "unsupported chat template" in r.stderr,
              f"unknown template refused: exit {r.returncode}: {r.stderr.strip()!r}")
        r = run(args.cli, "generate", "-m", d, "--chat", "--chat-format", "chatml", "-p", "hi",
                "-n", 2)
        check(r.returncode == 0, f"--chat-format chatml overrides: exit {r.returncode}")
        r = run(args.cli, "generate", "-m", d, "--chat", "--chat-format", "mistral", "-p", "hi")
        check(r.returncode != 0 and "chat-format" in r.stderr,
              f"unknown --chat-format refused: {r.stderr.strip()!r}")
        (d / "tokenizer.json").unlink()
        r = run(args.cli, "generate", "-m", d, "-p", "hi", "-n", 2)
        check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and
              "tokenizer.json" in r.stderr and "--tokenizer" in r.stderr,
              f"no tokenizer.json refused: {r.stderr.strip()!r}")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
