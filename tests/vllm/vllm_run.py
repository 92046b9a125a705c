"""Runs vLLM configurations one after another in this process and writes what the tests compare,
as JSON (run by test_vllm_plugin.py with the vLLM CPU environment's python):
  python vllm_run.py RUNS.json OUT.json
RUNS.json: {"prompts": [[token id, ...], ...], "tokens": greedy tokens per prompt,
            "runs": [{"name": str, "model": DIR, "arch": str | null, "compiled": bool,
                      "tp": int, "negative": null | "rstd" | "fold", "env": {VAR: value}}, ...]}
arch: the architecture vLLM builds (hf_overrides), e.g. FlashNormLlamaForCausalLM; null: the
checkpoint's own. negative (controls, TP 1 only): "rstd": the deferred linear skips the rstd
scale; "fold": the first norm's gain is not folded. env: set while the run builds its engine.
Optional: "lora": true (enable_lora), "reload": "all" |
"chunked" (after generating, the checkpoint's weights but o_proj / down_proj, which the CPU build
repacks, loaded again in one load_weights call, or in two: the norms, then the rest; then the
prompts generated again into "tokens_after_reload", or "reload_error").
TP 1 runs the engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the caller), TP 2
in two worker processes. OUT.json: {name: {"tokens": [[id, ...] per prompt], "logprobs": [[the
greedy token's logprob, ...] per prompt], "linear_calls": [flashnorm_linear calls per worker,
since the worker started], "model_class": the class vLLM built}} ({"error": str} for a run that
raised).
"""
import gc
import json
import os
import sys
import traceback


def worker_linear_calls(worker):
    import torch
    try:
        return int(torch.ops.flashnorm.linear_calls())
    except (AttributeError, RuntimeError):  # flashnorm's ops not loaded in this worker
        return 0


def worker_model_class(worker):
    return type(worker.model_runner.model).__name__


def worker_reload(worker, path, chunked):
    import glob

    from safetensors.torch import load_file
    sd = {}
    for f in sorted(glob.glob(path + "/*.safetensors")):
        sd.update(load_file(f))
    keep = [(k, v) for k, v in sd.items() if "o_proj" not in k and "down_proj" not in k]
    model = worker.model_runner.model
    if chunked:
        model.load_weights([(k, v) for k, v in keep if "norm" in k])
        model.load_weights([(k, v) for k, v in keep if "norm" not in k])
    else:
        model.load_weights(keep)


def no_rstd(x, weight, eps, mask=None, bias=None):
    import torch
    return torch.nn.functional.linear(x, weight, bias)


def run(r, prompts, n_tokens):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from flashnorm import deferred
    from flashnorm.vllm import models

    kw = {"hf_overrides": {"architectures": [r["arch"]]}} if r.get("arch") else {}
    original_linear, original_fold = deferred.deferred_linear, models._fold
    if r.get("negative") == "rstd":
        deferred.deferred_linear = no_rstd
    elif r.get("negative") == "fold":
        def fold_but_first(model, plan, loaded):
            plan.free = plan.free[1:]
            original_fold(model, plan, loaded)
        models._fold = fold_but_first
    env = r.get("env") or {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    if r.get("lora"):
        kw.update(enable_lora=True)
    try:
        llm = LLM(model=r["model"], skip_tokenizer_init=True, dtype="float32", max_model_len=256,
                  enforce_eager=not r.get("compiled"), tensor_parallel_size=r.get("tp", 1),
                  seed=0, max_num_seqs=8, **kw)
        before = llm.collective_rpc(worker_linear_calls)
        sp = SamplingParams(temperature=0.0, max_tokens=n_tokens, logprobs=0, ignore_eos=True,
                            detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                            use_tqdm=False)
        after = llm.collective_rpc(worker_linear_calls)
        result = {"tokens": [], "logprobs": [],
                  "linear_calls": [a - b for a, b in zip(after, before)],
                  "model_class": llm.collective_rpc(worker_model_class)[0]}
        for o in outs:
            c = o.outputs[0]
            result["tokens"].append(list(c.token_ids))
            result["logprobs"].append([lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)])
        if r.get("reload"):
            try:
                llm.collective_rpc(worker_reload, args=(r["model"], r["reload"] == "chunked"))
                again = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                                     use_tqdm=False)
                result["tokens_after_reload"] = [list(o.outputs[0].token_ids) for o in again]
            except Exception as e:  # noqa: BLE001 - the refusal is the expected outcome
                result["reload_error"] = f"{type(e).__name__}: {e}"
        del llm
        return result
    finally:
        deferred.deferred_linear, models._fold = original_linear, original_fold
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        cleanup_dist_env_and_memory()


def main():
    spec = json.load(open(sys.argv[1]))
    out = {}
    for r in spec["runs"]:
        try:
            out[r["name"]] = run(r, spec["prompts"], spec["tokens"])
        except Exception as e:  # noqa: BLE001 - reported per run, the others still run
            traceback.print_exc()
            out[r["name"]] = {"error": f"{type(e).__name__}: {e}"}
        with open(sys.argv[2], "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
