"""The environment vLLM's CPU build runs in for the tests (docs/vllm.md): its OpenMP runtime
preloaded, 1 GiB of KV cache, one core per tensor-parallel rank, TP 1 engines in the calling
process, callables allowed in collective_rpc (the tests read each worker's op counter), the
compile cache in the test's directory, and FLASHNORM_VLLM unset (each test opts in itself)."""
import os
import sys
from pathlib import Path


def vllm_env(work: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHNORM_VLLM")}
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if not iomp.exists():
        raise FileNotFoundError(f"{iomp}: not the vLLM environment (scripts/setup_vllm.sh)")
    env.update({"LD_PRELOAD": str(iomp), "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "VLLM_ALLOW_INSECURE_SERIALIZATION": "1", "VLLM_CACHE_ROOT": str(work / "cache"),
                "PYTHONUNBUFFERED": "1", **extra})
    return env
