#!/usr/bin/env python3
"""Records transformers' outputs on the real SmolLM2-135M-Instruct Q4_1 GGUF file, compactly.

The file (98 MB, fetched by deploy/install-deps.sh into build/models/) is not committed, and
neither are full-vocabulary logit rows (49152 floats each). Instead this writes
tests/golden/models/smollm2_135m_instruct_q4_1/reference_topk.json with, for every prompt:

  - teacher-forced logits: for each position of the prompt, the argmax id, the top-1/top-2
    margin, and the 16 highest logits with their ids (transformers' float32 eager forward over
    the whole prompt);
  - greedy continuations (chat prompts only): prompt ids from transformers' chat template, the
    greedy ids (explicit loop, full forward each step, no cache, no EOS stop), and the same
    top-16 summary of the logits each greedy id was chosen from.

Prompts are cut before the first teacher-forced position whose top-1/top-2 margin is below
MIN_MARGIN (logits at a position depend only on the tokens up to it, so the remaining
positions are unchanged), and greedy prompts are kept only if every step has a margin of at
least MIN_MARGIN: an engine within the tolerance must then reproduce every argmax and greedy id.

The tolerance evidence is measured here too: HF sdpa vs eager, and the independent float64
forward of make_golden.py (Float64Reference) on the weights transformers decoded.

Usage: record_smollm2.py [--model PATH] [--out PATH] [--threads N]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from make_golden import Float64Reference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEFAULT_MODEL = ROOT / "build" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = HERE / "models" / "smollm2_135m_instruct_q4_1" / "reference_topk.json"
TOPK = 16
GREEDY_STEPS = 32
MIN_PROMPT_TOKENS = 20
MAX_PROMPT_TOKENS = 60
# Teacher-forced positions and greedy steps need a top-1/top-2 gap of at least this, which
# must stay at least 4x the tolerance (20x the largest float32 difference measured, >= 1e-3).
MIN_MARGIN = 0.03

# Teacher-forced prompts: plain text (no BOS: the file's tokenizer.ggml.add_bos_token is false)
# and chat conversations rendered with the file's template (including an assistant turn, so
# the positions cover chat markup and ordinary text).
PLAIN_PROMPTS = [
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is "
    "Rome. The capital of Spain is Madrid. The capital of Portugal is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + "
    "fibonacci(n - 2)\n\nprint(fibonacci(10))",
    "Water boils at 100 degrees Celsius at sea level. At higher altitudes the air pressure is "
    "lower, so water boils at a lower temperature.",
]
CHAT_PROMPTS = [
    [{"role": "user", "content": "What is the largest planet in the solar system?"},
     {"role": "assistant", "content": "The largest planet in the solar system is Jupiter."}],
    [{"role": "user", "content": "Name three primary colors."},
     {"role": "assistant", "content": "Red, yellow and blue."}],
]
# Greedy continuations of these (chat template with the generation prompt).
GREEDY_PROMPTS = [
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [{"role": "user", "content": "Explain what a CPU does in two sentences."}],
    [{"role": "user", "content": "Give me three tips for learning a new language."}],
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "List the days of the week."}],
    [{"role": "user", "content": "Describe how to make a cup of tea."}],
    [{"role": "user", "content": "Tell me about the history of the bicycle."}],
]
NUM_TEACHER_FORCED = 4
NUM_GREEDY = 3


def summary(row: torch.Tensor) -> dict:
    """Argmax, top-1/top-2 margin and the TOPK highest logits with their ids of one row."""
    top = torch.topk(row, TOPK)
    assert int(top.indices[0]) == int(torch.argmax(row))
    return dict(
        argmax=int(top.indices[0]),
        margin=round(float(top.values[0] - top.values[1]), 5),
        top_ids=[int(i) for i in top.indices],
        top_logits=[round(float(v), 5) for v in top.values],
    )


@torch.no_grad()
def logits(model, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def chat_ids(tok, messages, generation_prompt: bool) -> tuple[list[int], str]:
    text = tok.apply_chat_template(messages, tokenize=False,
                                   add_generation_prompt=generation_prompt)
    return tok(text, add_special_tokens=False)["input_ids"], text


def to_json(value, indent: int = 0) -> str:
    """JSON with nesting indented, and objects / lists of plain values on one line."""
    pad = " " * (indent + 1)

    def flat(v):
        return not isinstance(v, (dict, list)) or (
            isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v))

    if isinstance(value, dict) and not all(flat(v) for v in value.values()):
        items = [f"{pad}{json.dumps(k)}: {to_json(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [pad + to_json(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(value)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()

    folder, name = str(args.model.parent), args.model.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)

    def load(attn: str):
        return AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, attn_implementation=attn).eval()

    model = load("eager")
    model_sdpa = load("sdpa")
    cfg = model.config.to_dict()
    ref64 = Float64Reference(cfg, model.state_dict())
    max_sdpa = max_f64 = 0.0
    max_logit = 0.0

    def cross_check(ids, eager):
        nonlocal max_sdpa, max_f64, max_logit
        max_sdpa = max(max_sdpa, float((logits(model_sdpa, ids) - eager).abs().max()))
        max_f64 = max(max_f64, float((ref64.logits(ids) - eager.double()).abs().max()))
        max_logit = max(max_logit, float(eager.abs().max()))

    teacher_forced = []
    candidates = [("text", p, tok(p, add_special_tokens=False)["input_ids"]) for p in PLAIN_PROMPTS]
    candidates += [("chat", json.dumps(m), chat_ids(tok, m, False)[0]) for m in CHAT_PROMPTS]
    for kind, source, ids in candidates:
        if len(teacher_forced) == NUM_TEACHER_FORCED:
            break
        ids = ids[:MAX_PROMPT_TOKENS]
        rows = logits(model, ids)
        margins = [float(r.topk(2).values[0] - r.topk(2).values[1]) for r in rows]
        cut = next((t for t, m in enumerate(margins) if m < MIN_MARGIN), len(ids))
        print(f"{kind} prompt of {len(ids)} tokens: first near tie at {cut}", file=sys.stderr)
        if cut < MIN_PROMPT_TOKENS:
            continue
        ids, rows = ids[:cut], rows[:cut]
        cross_check(ids, rows)
        teacher_forced.append(dict(kind=kind, source=source, token_ids=ids,
                                   positions=[summary(r) for r in rows]))
    assert len(teacher_forced) == NUM_TEACHER_FORCED, len(teacher_forced)

    greedy = []
    for messages in GREEDY_PROMPTS:
        if len(greedy) == NUM_GREEDY:
            break
        ids, text = chat_ids(tok, messages, True)
        seq, steps, rows = list(ids), [], []
        for _ in range(GREEDY_STEPS):
            rows.append(logits(model, seq)[-1])
            steps.append(summary(rows[-1]))
            seq.append(steps[-1]["argmax"])
        tokens = [s["argmax"] for s in steps]
        low = min(s["margin"] for s in steps)
        print(f"greedy {messages[0]['content']!r}: min margin {low:.3f}: "
              f"{tok.decode(tokens)!r}", file=sys.stderr)
        if low < MIN_MARGIN or tok.eos_token_id in tokens:
            continue
        # One causal forward over prompt + greedy ids gives the same rows.
        full = logits(model, seq)
        assert torch.allclose(full[len(ids) - 1:len(ids) - 1 + GREEDY_STEPS], torch.stack(rows),
                              atol=1e-4)
        cross_check(seq, full)
        greedy.append(dict(messages=messages, prompt_text=text, token_ids=ids,
                           greedy=tokens, greedy_text=tok.decode(tokens), steps=steps))
    assert len(greedy) == NUM_GREEDY, len(greedy)

    tolerance = max(1e-3, float(f"{20 * max(max_f64, max_sdpa):.1g}"))
    assert 4 * tolerance <= MIN_MARGIN, tolerance
    sha = hashlib.sha256(args.model.read_bytes()).hexdigest()
    ref = dict(
        model_file=f"build/models/{name}",
        model_sha256=sha,
        reference="transformers AutoModelForCausalLM.from_pretrained(gguf_file=...), float32, "
                  "eager attention; transformers dequantizes the blocks and un-permutes q/k",
        transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0],
        gguf_version=importlib.metadata.version("gguf"),
        vocab_size=model.config.vocab_size,
        top_k=TOPK,
        min_margin=MIN_MARGIN,
        tolerance=dict(
            logits_abs=tolerance,
            note=(f"Absolute, on the recorded top-{TOPK} logits (max |logit| {max_logit:.1f}). "
                  f"Observed over every recorded position: independent float64 forward vs HF "
                  f"float32 eager max |diff| {max_f64:.2e}; HF sdpa vs eager {max_sdpa:.2e}. "
                  f"Every recorded position and greedy step has a top-1/top-2 margin >= "
                  f"{MIN_MARGIN}, so argmax and greedy ids must match exactly. The bound is "
                  f"20x the larger difference, at least 1e-3."),
        ),
        checks=dict(fp64_vs_fp32_max_abs=max_f64, sdpa_vs_eager_max_abs=max_sdpa,
                    logits_max_abs=max_logit),
        teacher_forced=teacher_forced,
        greedy_steps=GREEDY_STEPS,
        greedy=greedy,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(to_json(ref) + "\n")
    print(f"wrote {args.out}: fp64 {max_f64:.2e} sdpa {max_sdpa:.2e} max|logit| {max_logit:.1f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
