"""Tokenizes the evaluation text for the KV-cache accuracy test with Hugging Face transformers.

The text is the Apache License 2.0 as Debian ships it (/usr/share/common-licenses/Apache-2.0),
freely redistributable English prose. The tokens come from transformers' tokenizer for the bundled
SmolLM2-135M-Instruct GGUF file, so the test does not depend on loom's own tokenizer.

    python make_tokens.py --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import json
import os

from transformers import AutoTokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="the SmolLM2 GGUF file")
    args = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "apache-2.0.txt"), encoding="utf-8").read()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                        gguf_file=os.path.basename(args.model))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out = {"source": "apache-2.0.txt", "tokenizer": "transformers, SmolLM2-135M-Instruct GGUF",
           "token_ids": ids}
    with open(os.path.join(here, "apache-2.0.tokens.json"), "w") as f:
        json.dump(out, f)
    print(len(ids), "tokens")


if __name__ == "__main__":
    main()
