#!/usr/bin/env python3
"""Encode throughput of loom's tokenizer against HF `tokenizers`, side by side.

Builds a text of --mb megabytes from the Python standard library's own source files (code,
comments and docstrings: a real, reproducible corpus that needs no download), trains a Llama-3
style byte-level BPE tokenizer with --vocab ids on it (or uses --tokenizer_dir), then encodes the
text in chunks of about --chunk_bytes (cut after a newline) on one thread with:
  loom      bench/text/tokenizer_bench (C++, best of --repeats)
  hf        tokenizers.Tokenizer.encode in a loop (single thread, best of --repeats)
  hf_batch  tokenizers.Tokenizer.encode_batch (HF's own thread pool, all cores)
and checks both produced the same ids (token count and checksum). Prints one JSON object with
the machine (CPU model, cores), the commit, the settings and MB/s for each.

Usage: build/venv/bin/python bench/text/compare_hf.py --bench build/<dir>/bench/tokenizer_bench
"""

import argparse
import json
import os
import subprocess
import sysconfig
import tempfile
import time

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stdlib_text(megabytes):
    """The first `megabytes` MB of the standard library's .py files, in sorted path order."""
    root = sysconfig.get_paths()["stdlib"]
    parts, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        dirnames[:] = [d for d in dirnames if d not in ("site-packages", "__pycache__")]
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read().decode("utf-8", "replace")
            parts.append(data)
            total += len(data.encode("utf-8"))
            if total >= megabytes * 1e6:
                return "".join(parts)
    return "".join(parts)


def train_llama3_style(text, vocab, out_dir):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    lines = text.split("\n")
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab - len(specials), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, f)


def chunks(text_bytes, chunk_bytes):
    """Same rule as tokenizer_bench.cc: cut after the first newline at or past chunk_bytes."""
    out, start = [], 0
    while start < len(text_bytes):
        end = min(len(text_bytes), start + chunk_bytes)
        newline = text_bytes.find(b"\n", end)
        end = len(text_bytes) if newline < 0 else newline + 1
        out.append(text_bytes[start:end].decode("utf-8", "replace"))
        start = end
    return out


def checksum(all_ids):
    value = 0
    for ids in all_ids:
        for i in ids:
            value = (value * 1000003 + i) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def run_hf(tok, pieces, repeats, batch):
    best, result = 1e30, None
    for _ in range(repeats):
        start = time.perf_counter()
        if batch:
            result = [e.ids for e in tok.encode_batch(pieces, add_special_tokens=False)]
        else:
            result = [tok.encode(p, add_special_tokens=False).ids for p in pieces]
        best = min(best, time.perf_counter() - start)
    return best, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="path of the tokenizer_bench binary")
    parser.add_argument("--tokenizer_dir", help="use this tokenizer instead of training one")
    parser.add_argument("--mb", type=float, default=8.0)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--chunk_bytes", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    text = stdlib_text(args.mb)
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "text.txt")
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(text)
        tok_dir = args.tokenizer_dir
        if tok_dir is None:
            tok_dir = os.path.join(tmp, "tokenizer")
            os.makedirs(tok_dir)
            train_llama3_style(text, args.vocab, tok_dir)
        loom = json.loads(subprocess.run(
            [args.bench, "--tokenizer_dir", tok_dir, "--text", text_path, "--chunk_bytes",
             str(args.chunk_bytes), "--repeats", str(args.repeats)],
            check=True, capture_output=True, text=True).stdout)
        tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
        with open(text_path, "rb") as f:
            pieces = chunks(f.read(), args.chunk_bytes)
    mb = len(text.encode("utf-8")) / 1e6
    single_s, single_ids = run_hf(tok, pieces, args.repeats, batch=False)
    batch_s, _ = run_hf(tok, pieces, args.repeats, batch=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    num_tokens = sum(len(ids) for ids in single_ids)
    settings = loom["settings"]
    settings.update({"tokenizer": args.tokenizer_dir or f"llama3-style byte-level BPE, {args.vocab} ids, "
                     "trained on the text", "text": f"Python {sysconfig.get_python_version()} stdlib "
                     ".py sources", "tokenizer_dir": None})
    report = {
        "machine": loom["machine"],
        "commit": commit,
        "settings": settings,
        "loom": {"mb_per_s": round(loom["loom"]["best_mb_per_s"], 2), "num_tokens": loom["loom"]["num_tokens"]},
        "hf_tokenizers": {"version": __import__("tokenizers").__version__,
                          "single_thread_mb_per_s": round(mb / single_s, 2),
                          "encode_batch_all_threads_mb_per_s": round(mb / batch_s, 2),
                          "num_tokens": num_tokens},
        "same_ids": loom["loom"]["num_tokens"] == num_tokens and loom["loom"]["checksum"] == checksum(single_ids),
    }
    report["loom_vs_hf_single_thread"] = round(report["loom"]["mb_per_s"] / report["hf_tokenizers"]["single_thread_mb_per_s"], 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
