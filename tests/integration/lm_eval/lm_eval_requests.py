"""The requests lm-evaluation-harness sends for this folder's tasks, and what Hugging Face
transformers computes for them. Shared by make_reference.py and compare_lm_eval.py.

lm-eval's `local-completions` model (with tokenizer_backend=huggingface) encodes text without
special tokens. A `loglikelihood` request (context, continuation) moves the context's trailing
spaces to the continuation, encodes context + continuation and splits it after the context's
tokens; the score is the sum of the continuation tokens' log-probabilities. A
`loglikelihood_rolling` request scores a whole text after the tokenizer's BOS token (one window:
every text here is far shorter than the model's context). Over /v1/completions both are one
prompt of token ids with echo, logprobs 1 and max_tokens 1; the continuation's scores are
token_logprobs[ctxlen:-1].
"""
import json
import math
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def read_jsonl(name):
    with open(os.path.join(HERE, "data", name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False).input_ids


def pair_request(tokenizer, context, continuation):
    """(ids, ctxlen) as lm-eval's _encode_pair makes them for a causal model."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = encode(tokenizer, context + continuation)
    ctxlen = len(encode(tokenizer, context))
    return whole, ctxlen


def rolling_request(tokenizer, text):
    """(ids, ctxlen): the BOS token, then the whole text, all of which is scored."""
    prefix = tokenizer.bos_token_id
    if prefix is None:
        prefix = tokenizer.eos_token_id
    return [prefix] + encode(tokenizer, text), 1


def requests(tokenizer):
    """Every request of both tasks: dicts with task, ids, ctxlen and the doc's text."""
    out = []
    for doc in read_jsonl("pairs.jsonl"):
        ids, ctxlen = pair_request(tokenizer, doc["context"], doc["continuation"])
        out.append({"task": "loom_echo_loglikelihood", "ids": ids, "ctxlen": ctxlen,
                    "text": doc["continuation"]})
    for doc in read_jsonl("texts.jsonl"):
        ids, ctxlen = rolling_request(tokenizer, doc["text"])
        out.append({"task": "loom_echo_perplexity", "ids": ids, "ctxlen": ctxlen,
                    "text": doc["text"]})
    return out


def transformers_logprobs(model, ids):
    """Per position 1.., the log-probability of ids[i] after ids[:i], and whether it is the
    most likely token there (float32, CPU)."""
    import torch
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(ids[1:])
    scores = logprobs[:-1].gather(1, target[:, None])[:, 0]
    greedy = logprobs[:-1].argmax(dim=-1) == target
    return [float(s) for s in scores], [bool(g) for g in greedy]


def metrics(reqs, lls, greedy):
    """The tasks' metrics as lm-eval aggregates them, from per-request log-likelihoods."""
    pairs = [i for i, r in enumerate(reqs) if r["task"] == "loom_echo_loglikelihood"]
    texts = [i for i, r in enumerate(reqs) if r["task"] == "loom_echo_perplexity"]
    total = sum(lls[i] for i in texts)
    words = sum(len(re.split(r"\s+", reqs[i]["text"])) for i in texts)
    num_bytes = sum(len(reqs[i]["text"].encode("utf-8")) for i in texts)
    return {
        "loom_echo_loglikelihood": {
            "perplexity": math.exp(-sum(lls[i] for i in pairs) / len(pairs)),
            "acc": sum(1.0 for i in pairs if greedy[i]) / len(pairs),
        },
        "loom_echo_perplexity": {
            "word_perplexity": math.exp(-total / words),
            "byte_perplexity": math.exp(-total / num_bytes),
            "bits_per_byte": -total / num_bytes / math.log(2),
        },
    }
