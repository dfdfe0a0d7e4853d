#!/usr/bin/env python3
"""Writes the tokenizer golden fixtures under tests/text/fixtures/tokenizers/<style>/.

Each style is a small byte-pair-encoding tokenizer trained here with HF `tokenizers` on a corpus
this script writes itself, configured like a current model family (Llama 3, GPT-2, Qwen2,
Llama 2 / Mistral v0.1, newer Mistral, Gemma, DeepSeek-V3, and one with Digits + NFKC +
Lowercase and added-token variants, and one whose Split patterns need Oniguruma syntax: a
script, a POSIX bracket, backreferences). Every style has exactly 512 ids in total (model vocabulary
plus added tokens), like the repository's golden test checkpoints.

For each style the script writes:
  tokenizer.json          the tokenizer, as HF `tokenizers` saves it
  tokenizer_config.json   bos/eos tokens and add_bos_token/add_eos_token, like a model repo
  cases.json              reference results of the HF `tokenizers.Tokenizer` on tokenizer.json:
                          encode (with and without special tokens) of hard strings, decode
                          (with and without skip_special_tokens) of those ids and of random ids,
                          and id_to_token of every id

Inputs with invalid UTF-8 are stored as hex bytes ("input_hex"); the reference encodes
`bytes.decode("utf-8", "replace")` of them, which is what the C++ tokenizer must do itself.

Regenerating gives identical files except for the `affixes` style: HF's trainer numbers the
"##x" / "x</w>" symbols in hash-map order, so its ids (and the cases recorded with them) may
change from run to run; each run's tokenizer.json and cases.json still agree.

Usage: build/venv/bin/python tests/text/make_tokenizer_fixtures.py  (needs `pip install tokenizers`)
"""

import json
import os
import random
import zlib

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tokenizers")
TOTAL_VOCAB = 512

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DEEPSEEK_MAIN = (r"[\r\n]|\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u0370-\u0373"
                 r"\u0391-\u03a1\u03a3-\u03f5\u0400-\u0481\u048a-\u052f]+|"
                 r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+|"
                 r"\s+$|[\s]+(?=[\S])|\s+|[\p{L}\p{N}]+|[^\s\p{L}\p{N}]+")


def corpus():
    """A small multilingual training corpus: prose, code, numbers, several scripts."""
    rng = random.Random(1234)
    words = ("the quick brown fox jumps over lazy dog we they you are not can't won't it's "
             "I'm you'll he'd THE Quick HELLO World token model server stream request sequence "
             "block step tensor batch cache prefix merge byte piece").split()
    lines = []
    for _ in range(600):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) + rng.choice(".,!?;:"))
    scripts = [
        "Привет мир, как дела? Это тест токенизатора.",
        "你好世界，这是一个分词器的测试。我们喜欢自然语言处理。",
        "こんにちは世界、カタカナとひらがなのテストです。",
        "مرحبا بالعالم هذا اختبار",
        "שלום עולם זה מבחן",
        "नमस्ते दुनिया यह एक परीक्षण है",
        "สวัสดีชาวโลก นี่คือการทดสอบ",
        "Ünïcödé café naïve résumé façade Straße ΕΛΛΗΝΙΚΑ ελληνικά",
        "def encode(self, text: str) -> list[int]:\n    return [ord(c) for c in text]\n",
        "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
        "if x == 42 and y != 3.14159:\n    print(f\"{x:>10} {y!r}\")\n",
        "numbers 0 1 12 123 1234 12345 2024-06-01 3.5e10 0x1F 1,000,000",
        "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
    ]
    for _ in range(40):
        lines.extend(scripts)
    syllables = "ka ri to mo na shi te lu vo ze pa qu ex in on al er st ng th".split()
    for _ in range(800):
        lines.append(" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))
                              for _ in range(rng.randint(3, 10))))
    for _ in range(200):
        lines.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 7))) for _ in range(6)))
    return lines


def hard_strings():
    """The inputs every style is checked on (str, or bytes for invalid UTF-8)."""
    return [
        "", " ", "  ", "\t", "\n", "\r\n", "a", "Hello world", " Hello world", "Hello world ",
        "Hello  world", "   leading and trailing   ", "tabs\tand\tnewlines\nline2\r\nline3\n\n\n",
        "multiple\n\n\nnewlines   \n  indented", "The quick brown fox jumps over the lazy dog.",
        "I'm sure you'll see it's THEIR car, DON'T you? We've, they'd, she'S",
        "0 1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 2024-06-01",
        "你好世界，这是一个测试。", "こんにちは、カタカナ テスト", "Привет, мир! ЁЖИК", "مرحبا بالعالم",
        "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ελληνικά ΕΛΛΗΝΙΚΑ", "Straße façade naïve",
        "e\u0301 a\u0308 combining marks \u0041\u030a \ufb01 ligature \u2460 \uff21\uff22 fullwidth",
        "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 heart ❤️ keycap 1️⃣",
        "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "<html><body class=\"x\">&amp; 'quotes'</body></html>", "snake_case_name camelCaseName",
        "special tokens: SPECIAL_A text", "x" * 200, "ab " * 60,
        "mixed 中文 English русский 123 😀 end", "\u00a0nbsp\u2003em space\u3000ideographic",
        "zero\u200bwidth\u200djoiner", "a\x00b\x01c\x7f", "\ufeffBOM at start",
        b"invalid \xff\xfe bytes", b"truncated \xe2\x82", b"\xc0\xaf overlong", b"\xed\xa0\x80 surrogate",
        b"\xf0\x9f\x98 cut emoji \xf0\x9f\x98\x80",
    ]


def special_strings(specials):
    """Inputs with the style's special tokens inside text."""
    if not specials:
        return []
    a = specials[0]
    b = specials[-1]
    return [
        a, a + b, a + "Hello" + b, "Hello" + a + "world", "Hello " + a + " world", " " + a + " ",
        "text " + b + "\n" + a + "user\nHi!" + b, a + a + a, "x" + a[:-1], "  " + b + "  tail",
    ]


def random_strings(specials, seed, count=40):
    """Random mixtures of hard characters and the style's special tokens."""
    rng = random.Random(seed)
    atoms = list(" \t\n\r  ") + list("aZé中ж9٣'-_.!?▁") + ["\u0301", "\u200d", "😀", "\U0001F3FD",
                                                              "'s", "'LL", "123", "  ", "\r\n"]
    atoms += list(specials) * 3
    return [("".join(rng.choice(atoms) for _ in range(rng.randint(0, 30)))) for _ in range(count)]


def write_style(name, tok, config, specials, extra_strings=(), edit=None):
    d = os.path.join(OUT_DIR, name)
    os.makedirs(d, exist_ok=True)
    total = tok.get_vocab_size(with_added_tokens=True)
    assert total == TOTAL_VOCAB, (name, total)
    data = json.loads(tok.to_str())
    if edit is not None:
        edit(data)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    # Reload from the saved file so the reference is exactly what the file says.
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    cases = []
    inputs = list(hard_strings()) + special_strings(specials) + list(extra_strings)
    inputs += random_strings(specials, zlib.crc32(name.encode()))
    for s in inputs:
        case = {}
        if isinstance(s, bytes):
            case["input_hex"] = s.hex()
            text = s.decode("utf-8", "replace")
        else:
            case["input"] = s
            text = s
        with_special = tok.encode(text, add_special_tokens=True).ids
        without = tok.encode(text, add_special_tokens=False).ids
        case["ids"] = with_special
        case["ids_no_special"] = without
        case["decoded"] = tok.decode(with_special, skip_special_tokens=False)
        case["decoded_skip_special"] = tok.decode(with_special, skip_special_tokens=True)
        cases.append(case)
    rng = random.Random(zlib.crc32(name.encode()))
    decode_cases = []
    for i in range(32):
        n = rng.randint(1, 24)
        ids = [rng.randrange(TOTAL_VOCAB) for _ in range(n)]
        if i % 4 == 0:  # byte-fallback runs and byte-level pieces that split characters
            ids = [rng.randrange(TOTAL_VOCAB) if rng.random() < 0.5 else rng.randrange(3, 260) for _ in range(n)]
        decode_cases.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                             "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        # One case per line: compact, and diffs stay readable.
        def lines(items):
            return ",\n".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in items)
        f.write('{"encode":[\n' + lines(cases) + '],\n"decode":[\n' + lines(decode_cases) +
                '],\n"id_to_token":' +
                json.dumps([tok.id_to_token(i) for i in range(TOTAL_VOCAB)], ensure_ascii=False) + "}\n")


def restricted_corpus(limit):
    """corpus() without the characters outside its `limit` most frequent ones (ties by code
    point), so training is deterministic and rarer characters are left to byte fallback."""
    lines = corpus()
    counts = {}
    for line in lines:
        for c in line:
            counts[c] = counts.get(c, 0) + 1
    keep = set(sorted(counts, key=lambda c: (-counts[c], c))[:limit]) | {" "}
    return ["".join(c for c in line if c in keep) for line in lines]


def train(normalizer, pre_tokenizer, vocab_size, alphabet=None, limit_alphabet=None):
    """Trains a BPE model; returns (vocab dict, merges list of pairs)."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    kwargs = {"vocab_size": vocab_size, "show_progress": False}
    if alphabet is not None:
        kwargs["initial_alphabet"] = alphabet
    lines = corpus() if limit_alphabet is None else restricted_corpus(limit_alphabet)
    tok.train_from_iterator(lines, trainers.BpeTrainer(**kwargs))
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def byte_level_style(name, pre_tokenizer, normalizer, specials, bos, eos, ignore_merges, config,
                     add_prefix_space=False, extra_strings=()):
    """Byte-level BPE (Llama 3, GPT-2, Qwen2, DeepSeek-V3): specials appended after the model."""
    vocab, merges = train(normalizer, pre_tokenizer, TOTAL_VOCAB - len(specials),
                          alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if bos is not None:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                          special_tokens=[(bos, tok.token_to_id(bos))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    write_style(name, tok, config, specials, extra_strings)


def sentencepiece_vocab(normalizer, pre_tokenizer, head):
    """A Llama-2-like vocabulary: `head` tokens, <0x00>..<0xFF>, then trained pieces."""
    size = TOTAL_VOCAB - len(head) - 256
    trained, merges = train(normalizer, pre_tokenizer, size, limit_alphabet=90)
    vocab = {t: i for i, t in enumerate(head)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(trained.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    assert len(vocab) == TOTAL_VOCAB, len(vocab)
    return vocab, merges


def llama2_style():
    head = ["<unk>", "<s>", "</s>"]
    vocab, merges = sentencepiece_vocab(
        None, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True), head)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in head])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])

    def edit(data):
        # Llama 2 files store merges as "a b" strings: write them that way to cover both forms.
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    write_style("llama2", tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                "add_bos_token": True, "add_eos_token": False}, ["<s>", "</s>"], edit=edit)


def mistral_style():
    head = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    meta = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    vocab, merges = sentencepiece_vocab(
        None, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True), head)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.pre_tokenizer = meta
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in head])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    write_style("mistral", tok, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
                                 "add_eos_token": False}, ["[INST]", "</s>"])


def gemma_style():
    head = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    vocab, merges = sentencepiece_vocab(
        None, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True), head)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in head])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", 2)])
    write_style("gemma", tok, {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True,
                               "add_eos_token": False}, ["<start_of_turn>", "<end_of_turn>"])


def digits_style():
    """Digits(individual) + NFKC + Lowercase, WordPiece-free BPE with a continuing prefix and
    added tokens exercising lstrip / rstrip / single_word / normalized."""
    pre = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.Punctuation()])
    norm = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip()])
    specials = ["[CLS]", "[SEP]", "[MASK]"]
    added = [AddedToken("<lstrip>", lstrip=True, special=True, normalized=False),
             AddedToken("<rstrip>", rstrip=True, special=False, normalized=False),
             AddedToken("word", single_word=True, special=False, normalized=False),
             AddedToken("NormTok", normalized=True, special=False),
             AddedToken("ｗｉｄｅ", normalized=True, special=False)]
    vocab, merges = train(norm, pre, TOTAL_VOCAB - len(specials) - len(added), limit_alphabet=120)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]" if "[UNK]" in vocab else None))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = None
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens(added)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    extra = ["a <lstrip> b", "a<lstrip>b", "x   <lstrip>   y", "a <rstrip>   b", "word words sword word.",
             "a word_b (word)", "normtok NormTok NORMTOK", "ｗｉｄｅ wide ＷＩＤＥ", "Digits 2024 and 3.14 ² ½",
             "[CLS] hello [SEP]", "x[MASK]y"]
    write_style("digits", tok, {"cls_token": "[CLS]", "sep_token": "[SEP]"}, ["[CLS]", "[SEP]"], extra)


def splits_style():
    """Every Split behaviour, invert, a regex Replace normalizer and ByteLevel with the GPT-2 regex
    and add_prefix_space, RobertaProcessing."""
    Regex = __import__("tokenizers").Regex
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=Regex(r"\d+"), behavior="merged_with_previous"),
        pre_tokenizers.Split(pattern="-", behavior="merged_with_next"),
        pre_tokenizers.Split(pattern=Regex(r"[A-Z]"), behavior="contiguous"),
        pre_tokenizers.Split(pattern=";", behavior="removed"),
        pre_tokenizers.Split(pattern=Regex(r"[^/]+"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    norm = normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex(r"\s+"), " "),
                                 normalizers.Strip(left=True, right=False)])
    specials = ["<s>", "</s>", "<pad>"]
    vocab, merges = train(norm, pre, TOTAL_VOCAB - len(specials), alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    extra = ["a-b-c 123abc 45 x/y//z; w;;v", "CamelCaseWORDS and-more-dashes 2024-06-01",
             "   spaced   out\n\ttext  ", "/leading/slash/", "---", ";;;"]
    write_style("splits", tok, {"bos_token": "<s>", "eos_token": "</s>"}, ["<s>", "</s>"], extra)


def wordpiece_like_style():
    """Whitespace pre-tokenizer, NFKD, BPE with continuing_subword_prefix and end_of_word_suffix,
    BertProcessing and the BPEDecoder."""
    pre = pre_tokenizers.Whitespace()
    norm = normalizers.NFKD()
    specials = ["[UNK]", "[CLS]", "[SEP]"]
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.train_from_iterator(restricted_corpus(100), trainers.BpeTrainer(
        vocab_size=TOTAL_VOCAB, special_tokens=specials, continuing_subword_prefix="##",
        end_of_word_suffix="</w>", show_progress=False))
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    write_style("affixes", tok, {"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]"},
                ["[CLS]", "[SEP]"], ["don't stop-me now!!", "x.y,z", "unknown ж ñ chars"])


def oniguruma_style():
    """Split patterns with Oniguruma syntax beyond the common tokenizer patterns: a script
    (\\p{Han}), a POSIX bracket ([[:alpha:]]) and a backreference (repeated letters, quotes)."""
    Regex = __import__("tokenizers").Regex
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=Regex(r"\p{Han}+"), behavior="isolated"),
        pre_tokenizers.Split(pattern=Regex(r"(['\"])[^'\"]*\1"), behavior="isolated"),
        pre_tokenizers.Split(pattern=Regex(r"(\p{L})\1+"), behavior="isolated"),
        pre_tokenizers.Split(pattern=Regex(r" ?[[:alpha:]]+|[[:digit:]]+|[[:space:]]+"),
                             behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    byte_level_style("oniguruma", pre, None, ["<|endoftext|>"], None, None, False,
                     {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
                     extra_strings=["中文和日本語の漢字 mixed 汉字", "bookkeeper aaa  'quoted' \"x\" 'open",
                                    "alpha: ab12 :: [[:alpha:]] ph", "Mississippi 2024 zzz..."])


def main(only=None):
    if only == "oniguruma":
        oniguruma_style()
        return
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    byte_level_style(
        "llama3", pre_tokenizers.Sequence([pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(LLAMA3_PATTERN),
                                                                behavior="isolated"), bl]),
        None, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|begin_of_text|>", "<|eot_id|>", True,
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    byte_level_style("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None,
                     ["<|endoftext|>"], None, None, False,
                     {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})
    byte_level_style(
        "qwen2", pre_tokenizers.Sequence([pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(QWEN2_PATTERN),
                                                               behavior="isolated"), bl]),
        normalizers.NFC(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, None, False,
        {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    Regex = __import__("tokenizers").Regex
    byte_level_style(
        "deepseek_v3", pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=Regex(r"\p{N}{1,3}"), behavior="isolated"),
            pre_tokenizers.Split(pattern=Regex(DEEPSEEK_CJK), behavior="isolated"),
            pre_tokenizers.Split(pattern=Regex(DEEPSEEK_MAIN), behavior="isolated"), bl]),
        None, ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
        "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", False,
        {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>",
         "add_bos_token": True, "add_eos_token": False})
    llama2_style()
    mistral_style()
    gemma_style()
    digits_style()
    splits_style()
    wordpiece_like_style()
    oniguruma_style()


if __name__ == "__main__":
    # `make_tokenizer_fixtures.py oniguruma` writes only that style.
    import sys
    main(sys.argv[1] if len(sys.argv) > 1 else None)
