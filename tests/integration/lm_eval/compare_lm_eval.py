#!/usr/bin/env python3
"""Runs lm-evaluation-harness's `local-completions` model against loomd on this folder's tasks
(tasks/*.yaml: a loglikelihood task on data/pairs.jsonl, a perplexity task on data/texts.jsonl)
and compares its scores, document by document and aggregated, with what Hugging Face
transformers computes for the same model and token ids (float32, CPU). Exits 1 when any differs
by more than --rtol (relative).

Needs lm-eval, torch and transformers in the Python that runs it (see README.md); not a ctest
(echo_reference_test.py is the cheap check that is).

  build/venv/bin/python tests/integration/lm_eval/compare_lm_eval.py \
      --loomd build/cpu-release/bin/loomd --model tests/golden/models/llama3_gqa
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import lm_eval_requests as lr

TASKS = ["loom_echo_loglikelihood", "loom_echo_perplexity"]


def start_loomd(args):
    cmd = [args.loomd, "--model", args.model, "--host", "127.0.0.1", "--port", "0",
           "--kv-cache-mb", "64", "--kv-cache-dtype", args.kv_dtype]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        sys.exit(f"loomd did not start: {line!r}")
    return proc, int(line.strip().rsplit(":", 1)[1])


def first_response(resps):
    """The log-likelihood in a logged sample's resps: [[ll]] (rolling) or [[[ll, greedy]]]."""
    value = resps[0][0]
    return value[0] if isinstance(value, (list, tuple)) else value


def run_lm_eval(args, port, out_dir):
    model_args = ",".join([
        f"model={os.path.basename(os.path.normpath(args.model))}",
        f"base_url=http://127.0.0.1:{port}/v1/completions",
        "tokenizer_backend=huggingface", f"tokenizer={os.path.abspath(args.model)}",
        "max_length=256", "num_concurrent=1", "max_retries=1"])
    cmd = [sys.executable, "-m", "lm_eval", "--model", "local-completions",
           "--model_args", model_args, "--tasks", ",".join(TASKS),
           "--include_path", os.path.join(lr.HERE, "tasks"),
           "--batch_size", str(args.batch_size), "--output_path", out_dir, "--log_samples"]
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               OPENAI_API_KEY=os.environ.get("OPENAI_API_KEY", "unused"))
    # The tasks name their data relative to this folder.
    subprocess.run(cmd, cwd=lr.HERE, env=env, check=True)
    results = sorted(glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True))
    with open(results[-1], encoding="utf-8") as f:
        metrics = json.load(f)["results"]
    samples = {}
    for task in TASKS:
        path = sorted(glob.glob(os.path.join(out_dir, "**", f"samples_{task}_*.jsonl"),
                                recursive=True))[-1]
        with open(path, encoding="utf-8") as f:
            docs = sorted((json.loads(line) for line in f), key=lambda d: d["doc_id"])
        samples[task] = [float(first_response(d["resps"])) for d in docs]
    return metrics, samples


def transformers_scores(args):
    import torch
    import transformers
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    reqs = lr.requests(tokenizer)
    lls, greedy = [], []
    for r in reqs:
        scores, is_greedy = lr.transformers_logprobs(model, r["ids"])
        lls.append(sum(scores[r["ctxlen"] - 1:]))
        greedy.append(all(is_greedy[r["ctxlen"] - 1:]))
    return reqs, lls, greedy


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loomd", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--kv-dtype", default="f32", help="loomd's KV cache type (bf16 rounds K/V)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rtol", type=float, default=1e-3)
    args = p.parse_args()
    reqs, ref_lls, ref_greedy = transformers_scores(args)
    want = lr.metrics(reqs, ref_lls, ref_greedy)
    proc, port = start_loomd(args)
    try:
        with tempfile.TemporaryDirectory() as out_dir:
            got, samples = run_lm_eval(args, port, out_dir)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ok = True
    print(f"\nloomd --kv-dtype {args.kv_dtype}, lm-eval batch size {args.batch_size}")
    print(f"{'task':26} {'metric':16} {'lm-eval/loomd':>22} {'transformers':>22} {'rel diff':>9}")
    for task, values in want.items():
        for name, value in values.items():
            mine = float(got[task][f"{name},none"])
            diff = rel(mine, value)
            ok = ok and diff <= args.rtol
            print(f"{task:26} {name:16} {mine:22.10g} {value:22.10g} {diff:9.2e}")
    for task in TASKS:
        ref = [ll for r, ll in zip(reqs, ref_lls) if r["task"] == task]
        worst = max(rel(a, b) for a, b in zip(samples[task], ref))
        ok = ok and len(samples[task]) == len(ref) and worst <= args.rtol
        print(f"{task}: {len(ref)} documents, worst per-document log-likelihood rel diff "
              f"{worst:.2e}")
    print("AGREE" if ok else f"DISAGREE (rtol {args.rtol})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
