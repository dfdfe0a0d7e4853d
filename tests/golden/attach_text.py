#!/usr/bin/env python3
"""Gives the golden checkpoints a tokenizer and a chat template, so `loom generate --prompt`,
`--chat` and loomd's text endpoints run on them.

The tokenizers are the reference fixtures of the text layer (tests/text/fixtures/tokenizers/,
trained with HF tokenizers to exactly 512 ids, the golden models' vocabulary), the templates are
the text layer's chat-template fixtures (tests/text/templates/). Weights are untouched, so the
recorded logits stay valid. Re-run after regenerating either:

  python3 tests/golden/attach_text.py
"""
import json
import pathlib
import shutil

HERE = pathlib.Path(__file__).resolve().parent
TEXT = HERE.parent / "text"

# golden model -> (tokenizer style, chat template or None)
ATTACH = {
    "llama3_gqa": ("llama3", "llama3.jinja"),
    "llama2_mha": ("llama2", "mistral_v1.jinja"),
    "mistral_window": ("mistral", "mistral_tools.jinja"),
    "qwen2_bias": ("qwen2", "chatml_qwen.jinja"),
    "qwen3_qknorm": ("qwen2", "qwen3.jinja"),
    "llama_linear_fp16": ("gpt2", None),  # a model without a chat template
}


def main():
    for model, (style, template) in ATTACH.items():
        dst = HERE / "models" / model
        src = TEXT / "fixtures" / "tokenizers" / style
        tokenizer = json.loads((src / "tokenizer.json").read_text())
        vocab = max(max(tokenizer["model"]["vocab"].values()),
                    max((t["id"] for t in tokenizer.get("added_tokens", [])), default=0)) + 1
        config = json.loads((dst / "config.json").read_text())
        assert vocab <= config["vocab_size"], (model, vocab, config["vocab_size"])
        shutil.copyfile(src / "tokenizer.json", dst / "tokenizer.json")
        tok_config = json.loads((src / "tokenizer_config.json").read_text())
        if template:
            tok_config["chat_template"] = (TEXT / "templates" / template).read_text()
        else:
            tok_config.pop("chat_template", None)
        (dst / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=1, ensure_ascii=False) + "\n")
        print(f"{model}: tokenizer {style}, template {template}")


if __name__ == "__main__":
    main()
