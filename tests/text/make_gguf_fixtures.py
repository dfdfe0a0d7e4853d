#!/usr/bin/env python3
"""Writes the GGUF tokenizer fixtures under tests/text/fixtures/gguf/ and their references.

A GGUF file carries no tokenizer.json: llama.cpp stores the vocabulary, merges, scores, token types,
special token ids and the chat template as `tokenizer.*` metadata. loom builds its Tokenizer and
ChatTemplate from that metadata (server/text/gguf_text.h) the way Hugging Face transformers does
(`AutoTokenizer.from_pretrained(dir, gguf_file=name)`), so transformers is the reference here.

The small files (tensor-free, written with the `gguf` package's GGUFWriter):
  gpt2_llama3.gguf    byte-level BPE (tokenizer.ggml.model = gpt2), pre = llama-bpe: the vocabulary
                      and merges of fixtures/tokenizers/llama3, control and user-defined tokens,
                      add_bos_token, a Llama 3 style chat template
  gpt2_qwen2.gguf     byte-level BPE, pre = qwen2 (fixtures/tokenizers/qwen2), a ChatML template,
                      a control token outside the byte alphabet (skipped, as transformers does)
  gpt2_default.gguf   byte-level BPE, a pre-tokenizer name nobody knows (falls back to GPT-2's
                      ByteLevel regex), a token spelled with raw bytes (respelled), add_eos_token
  spm_llama.gguf      SentencePiece BPE (tokenizer.ggml.model = llama) trained here with the
                      `sentencepiece` package: pieces, scores and types, <0xNN> byte fallback, no
                      merges (transformers derives them from the scores), a user-defined token
  spm_noprefix.gguf   the same vocabulary with add_space_prefix = false and no add_bos_token key
  spm_gemma2.gguf     the same vocabulary (plus space-run tokens) as a gemma2 file: Gemma's
                      normalizer, split and decoder, merges in token order
  spm_phi3.gguf       the same vocabulary as a phi3 file (prefix "▁" from a normalizer), with
                      add_eos_token and no BOS

For each file, and for build/models/SmolLM2-135M-Instruct.Q4_1.gguf when it is present (too big to
commit; deploy/install-deps.sh puts it there), <name>.cases.json records what transformers gives:
encode with and without special tokens, decode with and without skip_special_tokens, the special
token strings, and apply_chat_template renders of a few conversations.

Usage: build/venv/bin/python tests/text/make_gguf_fixtures.py   (needs gguf, sentencepiece and
transformers). Deterministic: a rerun writes identical files.
"""

import json
import os
import random
import sys
import tempfile
import zlib

import gguf
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(HERE, "fixtures", "gguf")
TOKENIZERS_DIR = os.path.join(HERE, "fixtures", "tokenizers")
SMOLLM2 = os.path.join(ROOT, "build", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

sys.path.insert(0, HERE)
from make_tokenizer_fixtures import hard_strings, random_strings, special_strings  # noqa: E402

# llama.cpp's token types.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}")
LLAMA2_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'system' %}{{ '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "  and 3+3?  "}],
    [{"role": "user", "content": "émoji 😀 and 中文\nnew line"}, {"role": "assistant", "content": "ok"}],
]


def add_llama_hparams(w, vocab_size):
    """Just enough model metadata for transformers to make a config (no tensors)."""
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_rope_dimension_count(16)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab_size)


def write_gguf(path, tokens, types, kv, scores=None, merges=None, arch="llama"):
    w = gguf.GGUFWriter(path, arch)
    add_llama_hparams(w, len(tokens))
    w.add_string("tokenizer.ggml.model", kv.pop("model"))
    if "pre" in kv:
        w.add_string("tokenizer.ggml.pre", kv.pop("pre"))
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    if scores is not None:
        w.add_array("tokenizer.ggml.scores", scores)
    if merges is not None:
        w.add_array("tokenizer.ggml.merges", merges)
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool("tokenizer." + key, value)
        elif isinstance(value, int):
            w.add_uint32("tokenizer." + key, value)
        else:
            w.add_string("tokenizer." + key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def byte_level_vocab(style):
    """Tokens (dense ids), token types and merges of a fixtures/tokenizers byte-level style."""
    with open(os.path.join(TOKENIZERS_DIR, style, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    by_id = {i: t for t, i in data["model"]["vocab"].items()}
    specials = {}
    for added in data["added_tokens"]:
        by_id[added["id"]] = added["content"]
        specials[added["content"]] = added["special"]
    tokens = [by_id[i] for i in range(len(by_id))]
    types = [CONTROL if specials.get(t) else USER_DEFINED if t in specials else NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, types, merges


def gpt2_llama3(path):
    tokens, types, merges = byte_level_vocab("llama3")
    tokens.append("<think>")
    types.append(USER_DEFINED)
    ids = {t: i for i, t in enumerate(tokens)}
    write_gguf(path, tokens, types, merges=merges, kv={
        "model": "gpt2", "pre": "llama-bpe", "ggml.bos_token_id": ids["<|begin_of_text|>"],
        "ggml.eos_token_id": ids["<|eot_id|>"], "ggml.add_bos_token": True,
        "chat_template": LLAMA3_TEMPLATE})
    return ["<|begin_of_text|>", "<|eot_id|>", "<think>"]


def gpt2_qwen2(path):
    tokens, types, merges = byte_level_vocab("qwen2")
    # A control token written with a character outside the byte alphabet: a llama.cpp mislabel
    # that transformers leaves out of the added tokens.
    tokens.append("<ctrl space>")
    types.append(CONTROL)
    ids = {t: i for i, t in enumerate(tokens)}
    write_gguf(path, tokens, types, merges=merges, kv={
        "model": "gpt2", "pre": "qwen2", "ggml.bos_token_id": ids["<|endoftext|>"],
        "ggml.eos_token_id": ids["<|im_end|>"], "ggml.padding_token_id": ids["<|endoftext|>"],
        "ggml.add_bos_token": False, "chat_template": CHATML_TEMPLATE})
    return ["<|im_start|>", "<|im_end|>", "<ctrl space>"]


def gpt2_default(path):
    tokens, types, merges = byte_level_vocab("gpt2")
    # Raw text instead of the byte alphabet: transformers respells it ("x y" -> "xĠy").
    tokens += ["x y", "ü"]
    types += [NORMAL, NORMAL]
    ids = {t: i for i, t in enumerate(tokens)}
    write_gguf(path, tokens, types, merges=merges, kv={
        "model": "gpt2", "pre": "no-such-pre-tokenizer", "ggml.eos_token_id": ids["<|endoftext|>"],
        "ggml.unknown_token_id": ids["<|endoftext|>"], "ggml.add_eos_token": True})
    return ["<|endoftext|>"]


SPM_TEXT = [
    "The quick brown fox jumps over the lazy dog while the server streams tokens.",
    "A request becomes a sequence; a sequence holds blocks of the key value cache.",
    "Numbers like 3.14159, 2024 and 1234567 appear in logs and in tests.",
    "def square(x):\n    return x * x  # a tiny function\n",
    "Über naïve façades the café served crème brûlée to a señor.",
    "It's what they'd say: we'll see, you're right, I've done it, don't worry.",
    "Prefix caching hashes full blocks; preemption recomputes what was dropped.",
    "Whitespace   runs,\ttabs and\nnew lines\n\nmatter to a tokenizer.",
    "Chat templates render messages with roles: system, user and assistant.",
    "Every byte that the vocabulary lacks falls back to a byte token.",
]


def train_sentencepiece(directory):
    rng = random.Random(7)
    lines = []
    for _ in range(400):
        lines.append(" ".join(rng.sample(SPM_TEXT, 3)))
    prefix = os.path.join(directory, "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, model_type="bpe", vocab_size=700,
        byte_fallback=True, character_coverage=1.0, num_threads=1, user_defined_symbols=["<think>"],
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, split_digits=True, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        tokens.append(piece)
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(UNKNOWN)
        elif sp.is_control(i):
            types.append(CONTROL)
        elif sp.is_byte(i):
            types.append(BYTE)
        elif piece == "<think>":
            types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
    return tokens, scores, types


def spm_files(directory, path_prefix, noprefix_path, gemma_path, phi3_path):
    tokens, scores, types = train_sentencepiece(directory)
    write_gguf(path_prefix, tokens, types, scores=scores, kv={
        "model": "llama", "ggml.bos_token_id": 1, "ggml.eos_token_id": 2,
        "ggml.unknown_token_id": 0, "ggml.add_space_prefix": True, "ggml.add_bos_token": True,
        "ggml.add_eos_token": False, "chat_template": LLAMA2_TEMPLATE})
    write_gguf(noprefix_path, tokens, types, scores=scores, kv={
        "model": "llama", "ggml.bos_token_id": 1, "ggml.eos_token_id": 2,
        "ggml.unknown_token_id": 0, "ggml.add_space_prefix": False})
    # Gemma stores runs of spaces as spaces; its merges follow token order, not scores.
    write_gguf(gemma_path, tokens + ["  ", "   "], types + [NORMAL, NORMAL],
               scores=scores + [-1000.0, -1001.0], arch="gemma2", kv={
                   "model": "llama", "ggml.bos_token_id": 1, "ggml.eos_token_id": 2,
                   "ggml.unknown_token_id": 0, "chat_template": LLAMA2_TEMPLATE})
    write_gguf(phi3_path, tokens, types, scores=scores, arch="phi3", kv={
        "model": "llama", "ggml.bos_token_id": 1, "ggml.eos_token_id": 2,
        "ggml.unknown_token_id": 0, "ggml.add_bos_token": False, "ggml.add_eos_token": True})
    return ["<s>", "</s>", "<think>", "<unk>"]


def record(path, specials, cases_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    name = os.path.basename(path)
    inputs = list(hard_strings()) + special_strings(specials)
    inputs += random_strings(specials, zlib.crc32(name.encode()))
    inputs += ["▁leading metaspace", "<0x41> is not a byte token in text", "  <think>x</think>"]
    cases = []
    for s in inputs:
        case = {}
        if isinstance(s, bytes):
            case["input_hex"] = s.hex()
            text = s.decode("utf-8", "replace")
        else:
            case["input"] = s
            text = s
        ids = tok.encode(text, add_special_tokens=True)
        case["ids"] = ids
        case["ids_no_special"] = tok.encode(text, add_special_tokens=False)
        case["decoded"] = tok.decode(ids, skip_special_tokens=False)
        case["decoded_skip_special"] = tok.decode(ids, skip_special_tokens=True)
        cases.append(case)
    vocab_size = len(tok)
    rng = random.Random(zlib.crc32(name.encode()))
    decode_cases = []
    for _ in range(32):
        ids = [rng.randrange(vocab_size) for _ in range(rng.randint(1, 24))]
        decode_cases.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                             "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    chats = []
    if tok.chat_template:
        for messages in CONVERSATIONS:
            for gen in (False, True):
                chats.append({"messages": messages, "add_generation_prompt": gen,
                              "rendered": tok.apply_chat_template(
                                  messages, tokenize=False, add_generation_prompt=gen)})
    header = {
        "vocab_size": vocab_size,
        "bos_token": tok.bos_token, "eos_token": tok.eos_token,
        "unk_token": tok.unk_token, "pad_token": tok.pad_token,
        "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
        "special_ids": sorted(tok.all_special_ids),
    }

    def lines(items):
        return ",\n".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in items)

    with open(cases_path, "w", encoding="utf-8") as f:
        f.write('{"reference":' + json.dumps(header, ensure_ascii=False) + ',\n"encode":[\n' +
                lines(cases) + '],\n"decode":[\n' + lines(decode_cases) + '],\n"chat":[\n' +
                lines(chats) + ']}\n')
    print(f"{name}: {len(cases)} encode cases, {len(decode_cases)} decode cases, "
          f"{len(chats)} chat renders")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    files = {}
    for name, make in (("gpt2_llama3", gpt2_llama3), ("gpt2_qwen2", gpt2_qwen2),
                       ("gpt2_default", gpt2_default)):
        path = os.path.join(OUT_DIR, name + ".gguf")
        files[name] = (path, make(path))
    with tempfile.TemporaryDirectory() as scratch:
        prefix = os.path.join(OUT_DIR, "spm_llama.gguf")
        noprefix = os.path.join(OUT_DIR, "spm_noprefix.gguf")
        gemma = os.path.join(OUT_DIR, "spm_gemma2.gguf")
        phi3 = os.path.join(OUT_DIR, "spm_phi3.gguf")
        specials = spm_files(scratch, prefix, noprefix, gemma, phi3)
        for name, path in (("spm_llama", prefix), ("spm_noprefix", noprefix),
                           ("spm_gemma2", gemma), ("spm_phi3", phi3)):
            files[name] = (path, specials)
    for name, (path, specials) in files.items():
        record(path, specials, os.path.join(OUT_DIR, name + ".cases.json"))
    if os.path.exists(SMOLLM2):
        record(SMOLLM2, ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
               os.path.join(OUT_DIR, "smollm2.cases.json"))
    else:
        print(f"{SMOLLM2} not found: smollm2.cases.json left as it is")


if __name__ == "__main__":
    main()
