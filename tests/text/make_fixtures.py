#!/usr/bin/env python3
"""Regenerates every reference fixture of the text layer from the Python references.

Runs, in order, the three generators next to this file and writes their outputs under
tests/text/fixtures/:
  make_regex_fixtures.py      match spans of tokenizer.json regex patterns (HF tokenizers)
  make_tokenizer_fixtures.py  trained tokenizers in each family's style and their encode/decode
                              results (HF tokenizers)
  make_template_fixtures.py   chat templates rendered as Hugging Face transformers renders them
                              (Python jinja2)

Needs the packages deploy/install-deps.sh puts in build/venv (tokenizers, jinja2):
  build/venv/bin/python tests/text/make_fixtures.py
"""
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
GENERATORS = ["make_regex_fixtures.py", "make_tokenizer_fixtures.py", "make_template_fixtures.py"]


def main() -> int:
    for name in GENERATORS:
        print(f"== {name}", flush=True)
        result = subprocess.run([sys.executable, str(HERE / name)], check=False)
        if result.returncode != 0:
            print(f"{name} failed with exit code {result.returncode}", file=sys.stderr)
            return result.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
