"""Runs vLLM pooling-runner configurations one after another in this process and writes their
embeddings as JSON (run by test_vllm_pooling.py with the vLLM CPU environment's python):
  python vllm_embed_run.py RUNS.json OUT.json
RUNS.json: {"runs": [{"name": str, "model": DIR, "arch": str | null (hf_overrides'
architectures; null: the checkpoint's own), "ids": [[token id, ...] per text],
"negative": null | "rstd" (the deferred linear skips the rstd scale)}, ...]}
OUT.json: {name: {"embeddings": [[float, ...] per text], "linear_calls": flashnorm_linear calls
of the worker during the run, "model_class": the class vLLM built}} ({"error": str} for a run
that raised). The engines run in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the caller).
"""
import gc
import json
import sys
import traceback

from vllm_run import no_rstd, worker_linear_calls, worker_model_class


def run(r):
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    from flashnorm import deferred

    kw = {"hf_overrides": {"architectures": [r["arch"]]}} if r.get("arch") else {}
    original_linear = deferred.deferred_linear
    if r.get("negative") == "rstd":
        deferred.deferred_linear = no_rstd
    try:
        llm = LLM(model=r["model"], runner="pooling", dtype="float32", max_model_len=256,
                  enforce_eager=True, seed=0, max_num_seqs=16, **kw)
        before = llm.collective_rpc(worker_linear_calls)[0]
        outs = llm.embed([TokensPrompt(prompt_token_ids=p) for p in r["ids"]], use_tqdm=False)
        result = {"embeddings": [list(map(float, o.outputs.embedding)) for o in outs],
                  "linear_calls": llm.collective_rpc(worker_linear_calls)[0] - before,
                  "model_class": llm.collective_rpc(worker_model_class)[0]}
        del llm
        return result
    finally:
        deferred.deferred_linear = original_linear
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        cleanup_dist_env_and_memory()


def main():
    spec = json.load(open(sys.argv[1]))
    out = {}
    for r in spec["runs"]:
        try:
            out[r["name"]] = run(r)
        except Exception as e:  # noqa: BLE001 - reported per run, the others still run
            traceback.print_exc()
            out[r["name"]] = {"error": f"{type(e).__name__}: {e}"}
        with open(sys.argv[2], "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
