#!/usr/bin/env python3
"""Writes reference.json: for every request of this folder's lm-eval tasks (lm_eval_requests.py),
the token ids and the log-probability transformers computes for each position 1.. with the
golden llama3_gqa checkpoint in float32 on the CPU. echo_reference_test.py checks loomd's echoed
prompt log-probabilities against it without needing torch.

  build/venv/bin/python tests/integration/lm_eval/make_reference.py
(needs torch and transformers: deploy/install-deps.sh --golden)
"""
import argparse
import json
import os

import torch
import transformers

import lm_eval_requests as lr


def main():
    root = os.path.abspath(os.path.join(lr.HERE, "..", "..", ".."))
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=os.path.join(root, "tests", "golden", "models", "llama3_gqa"))
    p.add_argument("--out", default=os.path.join(lr.HERE, "reference.json"))
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    out = []
    for r in lr.requests(tokenizer):
        scores, greedy = lr.transformers_logprobs(model, r["ids"])
        out.append({"task": r["task"], "text": r["text"], "ids": r["ids"], "ctxlen": r["ctxlen"],
                    "logprobs": [round(s, 6) for s in scores], "greedy": greedy})
    doc = {
        "model": os.path.basename(os.path.normpath(args.model)),
        "made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                      "dtype": "float32"},
        "requests": out,
    }
    with open(args.out, "w", encoding="utf-8") as f:  # one request per line
        f.write('{"model": %s,\n "made_with": %s,\n "requests": [\n' % (
            json.dumps(doc["model"]), json.dumps(doc["made_with"])))
        f.write(",\n".join(json.dumps(r, ensure_ascii=False) for r in out))
        f.write("\n]}\n")
    print(f"wrote {len(out)} requests to {args.out}")


if __name__ == "__main__":
    main()
