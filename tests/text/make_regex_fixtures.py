#!/usr/bin/env python3
"""Writes the regex golden fixtures: match spans of HF tokenizers (Oniguruma) for each pattern
on a corpus of hard strings.

Usage: make_regex_fixtures.py [--out tests/text/fixtures/regex]

Needs the `tokenizers` package. For each pattern, `Split(Regex(p), behavior="removed",
invert=True)` keeps exactly the (non-empty) matches of onig's find_iter, with character
offsets; they are converted to UTF-8 byte offsets. Empty matches are invisible through this
interface, so the fixtures hold non-empty matches only (the consumer compares those).
Patterns onig rejects are recorded with "error": true.

Besides the hand-written patterns (matches.json) it writes random.json: patterns drawn from a
small grammar of the supported syntax (seeded, so the output is reproducible) on random texts
drawn from a pool of hard characters, in the same format. That is what found most semantic
corners of Oniguruma (which brackets fold under (?i), where '^' matches, what may be repeated).

Output: matches.json = {"texts": [...], "patterns": [{"name", "pattern", "error",
"matches": [[[begin, end], ...] per text]}]}.

It also writes unicode.json, the reference for the Unicode functions the regex classes and the
tokenizer normalizers rest on (server/text/unicode/unicode.h), from Python's unicodedata and
str.lower: {"unicode_version", "categories": [[first, last, "Lu"], ...] (runs of assigned code
points; unassigned ones are left out because Python's Unicode version may be older than
utf8proc's), "normalization": [{"text", "nfc", "nfd", "nfkc", "nfkd"}], "lowercase": [{"text",
"lower"}]}.
"""
import unicodedata
import argparse
import json
import os
import random

from tokenizers import Regex, pre_tokenizers

# Pre-tokenizer / normalizer patterns of released tokenizer.json files.
MODEL_PATTERNS = [
    ("gpt2", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"),
    ("llama3", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ("qwen2", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ("deepseek_v3_digits", r"\p{N}{1,3}"),
    ("deepseek_v3_cjk", r"[一-龥぀-ゟ゠-ヿ]+"),
    ("deepseek_v3_main", r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ("o200k", r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ("tekken", r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ("bloom", r" ?[^(\s|[.,!?…。，、।۔،])]+"),
    ("deepseek_llm_newline", r"[\r\n]"),
    ("deepseek_llm_latin", r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"),
    ("deepseek_llm_punct", r"\s?[!-/:-~！-／：-～‘-‟　-。]+"),
    ("deepseek_llm_trailing", r"\s+$"),
    ("deepseek_llm_cjk", r"[一-龥ࠀ-一가-퟿]+"),
    ("digits_run", r"\p{N}+"),
    ("metaspace_space", r" "),
    ("metaspace_marker", r"▁"),
    ("multi_space", r" {2,}"),
    ("leading_space", r"^ "),
]

# One or a few patterns per feature of the syntax.
FEATURE_PATTERNS = [
    ("literal_utf8", r"café|日本|😀"),
    ("escapes_ctrl", r"\t|\n|\r|\f|\v|\x41|\x{1F600}|\u00e9|\x{3000}"),
    ("escaped_punct", r"\.\-\[\]\\\(\)\{\}\*\+\?\|\^\$"),
    ("class_s", r"\s+"),
    ("class_S", r"\S+"),
    ("class_d", r"\d+"),
    ("class_D", r"\D+"),
    ("class_w", r"\w+"),
    ("class_W", r"\W+"),
    ("class_h", r"\h+"),
    ("prop_groups", r"\p{L}+|\p{M}+|\p{N}+|\p{P}+|\p{S}+|\p{Z}+|\p{C}+"),
    ("prop_subcats", r"\p{Lu}+|\p{Ll}+|\p{Lt}+|\p{Lm}+|\p{Lo}+|\p{Mn}+|\p{Mc}+|\p{Nd}+|\p{No}+"),
    ("prop_negated", r"\P{L}+|\p{^N}+"),
    ("prop_long_names", r"\p{Letter}+|\p{Punctuation}+|\p{Symbol}+"),
    ("prop_punct_kinds", r"\p{Pd}|\p{Ps}|\p{Pe}|\p{Pi}|\p{Pf}|\p{Pc}|\p{Sm}|\p{Sc}|\p{Sk}|\p{So}"),
    ("prop_other", r"\p{Cf}+|\p{Cc}+|\p{Zs}+|\p{Zl}|\p{Zp}|\p{Co}"),
    ("class_ranges", r"[a-zA-Z0-9_]+"),
    ("class_negated", r"[^a-z\s]+"),
    ("class_props", r"[\p{L}\p{M}]+"),
    ("class_negated_props", r"[^\s\p{L}\p{N}]+"),
    ("class_escapes", r"[\t\n\r\\\]\[\-]+"),
    ("class_dash_ends", r"[-a]+|[b-]+"),
    ("class_nested", r"[a-c[x-z]]+"),
    ("class_intersection", r"[a-z&&[^aeiou]]+"),
    ("class_posix", r"[[:word:]]+|[[:digit:]]+|[[:punct:]]+|[[:space:]]+"),
    ("class_posix_more", r"[[:xdigit:]]+|[[:cntrl:]]+|[[:blank:]]+|[[:^space:]]+"),
    ("prop_word_punct", r"\p{Word}+|\p{Punct}+"),
    ("class_unicode_range", r"[α-ω]+|[а-я]+|[ぁ-ん]+"),
    ("dot", r"a.c|.+"),
    ("dot_m", r"(?m:a.b)"),
    ("groups", r"(ab)+|(?:cd)+|(?<name>ef)+"),
    ("alternation_order", r"a|ab|abc"),
    ("star_plus_q", r"ab*c|ab+d|ab?e"),
    ("lazy", r"a.*?b|x+?|y??z"),
    ("possessive", r"a++b|c*+d|e?+e"),
    ("counted", r"x{2}|y{2,}|z{1,3}|w{,2}q"),
    ("counted_lazy", r"x{2,3}?|y{2,}?"),
    ("counted_group", r"(?:ab){2,3}|(?:c|d){3}"),
    ("anchors_line", r"^\w+|\w+$"),
    ("anchors_text", r"\A\w+|\w+\z"),
    ("anchor_Z", r"\w+\Z"),
    ("word_boundary", r"\b\w|\w\b"),
    ("not_word_boundary", r"\B\w\B"),
    ("lookahead", r"\w+(?=\s)|\d+(?!\d|\.)"),
    ("lookbehind", r"(?<=\s)\w+|(?<!\w)\d"),
    ("lookbehind_alt", r"(?<=ab|c)\w"),
    ("atomic", r"(?>a+)b|(?>x|xy)z"),
    ("ignore_case_group", r"(?i:hello|world)|(?i:ǅ)"),
    ("ignore_case_inline", r"a(?i)bc|d"),
    ("ignore_case_class", r"(?i)[a-f]+|(?i)[^k\s]"),
    ("ignore_case_unicode", r"(?i:σ+|ω|ǆ|é)"),
    ("ignore_case_specials", r"(?i:s|k)"),
    ("ignore_case_multi_char", r"(?i:straße|ǰ)|(?i)ss|(?i)ﬁ|(?i:fi)"),
    ("empty_alternative", r"a|"),
    ("nullable_star", r"(?:a|b?)*c"),
    ("nested_quantifiers", r"(?:a{1,2}){2}b"),
    ("extended", r"(?x) a b # comment"),
    ("comment_group", r"a(?#note)b"),
    ("brace_literals", r"\{|a{,}|b{x}"),
]

TEXTS = [
    "",
    "Hello world",
    "I'm sure you'RE right, they'LL say it's fine; we'd've DON'T 'S 'T",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000 0xFF 1e10",
    "  leading and trailing spaces  ",
    "tabs\tand\nnewlines\r\nand\r\rcarriage\n\n\nreturns\n",
    "multiple   spaces    here\t\t\ttabs",
    "trailing whitespace \n \n  ",
    "\u00a0nbsp\u00a0between\u3000ideographic\u3000space\u2028line\u2029para\u0085nel",
    "中文测试：你好，世界！这是一个句子。",
    "日本語のテキスト、ひらがなとカタカナとKanji漢字。ｶﾀｶﾅ",
    "한국어 텍스트입니다. 안녕하세요!",
    "العربية: مرحبا بالعالم ١٢٣٤",
    "עברית: שלום עולם",
    "हिन्दी पाठ: नमस्ते दुनिया १२३",
    "ภาษาไทย สวัสดีครับ",
    "Русский текст: Привет, мир! ЁЖИК",
    "Ελληνικά: Γειά σου Κόσμε! ΟΔΥΣΣΕΥΣ σοφός",
    "Emoji: 😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇺🇸",
    "Combining: e\u0301 a\u0300\u0301 n\u0303o Ǆǅǆ ﬁ",
    "Punctuation!!! ??? ... --- ((( ))) [[[ ]]] {{{ }}} \"quotes\" «guillemets» „low“",
    "def foo(x):\n    return x**2 + bar[i] # comment\n\tif (a && b) { c->d(); }",
    "<|endoftext|> <s>[INST] hello [/INST]</s> {{ var }} {% for %}",
    "URL: https://example.com/path?query=1&b=2#frag email@test.org",
    "Math: ∑∫√∞≠≤≥ ±×÷ €£¥$ ©®™ °C ½¾",
    "MiXeD CaSe WoRdS aNd ABBREVIATIONS like NASA and iPhone McDonald's",
    "straße STRASSE ǅemal Ǉ ǈ ǉ ΣΑΣ σας Kelvin\u212a ſtate Ångström\u212b",
    "Strasse STRAẞE ßs sß ſs ﬁle FILE ﬀ ffi ǰ J\u030c ŉ ʼN",
    "a\u200db\u200cc\u00adsoft\ufeffbom\u2060joiner",
    "/path/to/file.txt C:\\Windows\\system32 ../relative",
    "x" * 40 + " " + "1" * 17 + " " + "!" * 9,
    "ab abc aab xyz xxyz yz acbd aXc abbbc abd ae abe",
    "The quick brown fox jumps over the lazy dog. 'Twas brillig!",
    "line one\nline two\nlast line",
    "\n",
    " ",
    "   ",
    "\r\n",
    "a",
    "哈哈哈哈哈哈哈哈123456789",
    "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
    "mixed中文and English混合text123数字",
    "Ⓐⓑⓒ 🅰🅱 ℕ ℝ ① ⅷ",
    "$100.00 + €50 = £120 (approx.) #hashtag @mention",
    "hello world how are you\t\n",
    "ends with newline\n",
    "x\u0308\u0301y\u0327 \u0915\u094d\u0937",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 𝟏𝟐𝟑",
]


def byte_offsets(text):
    """Map from character offset to UTF-8 byte offset (one more entry than characters)."""
    out = [0]
    for ch in text:
        out.append(out[-1] + len(ch.encode("utf-8")))
    return out


def matches_of(pattern, text):
    keep = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
    drop = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=False)
    kept = keep.pre_tokenize_str(text)
    dropped = drop.pre_tokenize_str(text)
    # The kept and removed pieces must tile the text: a check that the interface does what the
    # fixture assumes.
    pieces = sorted([o for _, o in kept] + [o for _, o in dropped])
    pos = 0
    for begin, end in pieces:
        assert begin == pos and end > begin, (pattern, text, pieces)
        pos = end
    assert pos == len(text), (pattern, text, pieces)
    offsets = byte_offsets(text)
    return [[offsets[b], offsets[e]] for _, (b, e) in kept]


# Building blocks of random patterns and texts.
RANDOM_LITERALS = list("asStkKdlmre019 _-'!,.") + [
    "ß", "ẞ", "ﬁ", "ss", "fi", "ǰ", "ŉ", "é", "中", "ひ", "Σ", "σ", "ǅ", "😀", "ſ", r"\u00e9",
    r"\x41", r"\t", r"\n", r"\r", r"\.", r"\-", r"\\", r"\("]
RANDOM_ESCAPES = [r"\s", r"\S", r"\d", r"\D", r"\w", r"\W", r"\h", r"\p{L}", r"\p{N}", r"\p{Lu}",
                  r"\p{Ll}", r"\P{L}", r"\p{P}", r"\p{S}", r"\p{M}", r"\p{Z}", r"\p{^N}"]
RANDOM_ANCHORS = ["^", "$", r"\b", r"\B", r"\A", r"\z", r"\Z"]
RANDOM_CHARS = list("aAzZ09 _-'\"!?.,;:/\\()[]{}<>@#$%^&*+=|~`\t\n\r\x0b\x0csStTkKlLdDmMrReEvV") + [
    "\u00a0", "\u3000", "\u2028", "\u2029", "\x85", "\u200b", "\u200d", "\u00ad", "\u0301",
    "\u0308", "\u094d", "\u0903", "é", "ß", "ſ", "\u212a", "Σ", "σ", "ς", "ǅ", "Ǆ", "中", "文",
    "ひ", "カ", "ｶ", "한", "ع", "ש", "क", "ก", "Ж", "ж", "Ω", "١", "٣", "१", "½", "²", "①", "Ⅷ",
    "ⅷ", "😀", "👍", "🏽", "🇺", "€", "£", "∑", "©", "«", "»", "“", "”", "‿", "–", "—",
    "\U0001d518", "\U0001f170", "Ⓐ", "ʰ", "ー", "々", "〇", "\ue000", "\x01", "\x7f", "µ", "ª",
    "º", "İ", "ı"]
RANDOM_CHUNKS = ["'s", "'T", "'re", "'LL", "'ve", "'m", "'D", "  ", "\r\n", " \n", "123", "1234567",
                 "SS", "ss", "FI", "J\u030c", "\u02bcn", "\u017fs"]


def random_text(rng):
    parts = []
    for _ in range(rng.randint(0, 40)):
        pool = RANDOM_CHUNKS if rng.random() < 0.15 else RANDOM_CHARS
        parts.append(rng.choice(pool))
    return "".join(parts)


def random_class(rng):
    items = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.4:
            items.append(rng.choice(RANDOM_ESCAPES))
        elif r < 0.7:
            lo, hi = sorted(rng.sample("abcdefxyzAKST0159", 2))
            items.append(lo + "-" + hi)
        else:
            items.append(rng.choice(["a", "s", "'", r"\-", r"\]", r"\[", "é", "中", r"\n", " ", "_"]))
    return "[" + ("^" if rng.random() < 0.3 else "") + "".join(items) + "]"


def random_atom(rng, depth):
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice(RANDOM_LITERALS)
    if r < 0.5:
        return rng.choice(RANDOM_ESCAPES)
    if r < 0.62:
        return random_class(rng)
    if r < 0.66:
        return "."
    if r < 0.72:
        return rng.choice(RANDOM_ANCHORS)
    # No capturing groups: when one that can match empty is repeated, Oniguruma's empty-iteration
    # check also compares captures, which an engine without captures does not model (a known
    # difference; tokenizer patterns never repeat such a group).
    group = rng.choice(["(?:", "(?i:", "(?=", "(?!", "(?>", "(?<=", "(?<!"])
    if group in ("(?<=", "(?<!"):
        pool = RANDOM_LITERALS + RANDOM_ESCAPES[:6]
        return group + "".join(rng.choice(pool) for _ in range(rng.randint(1, 3))) + ")"
    return group + random_alternation(rng, depth + 1) + ")"


def random_quantified(rng, depth):
    atom = random_atom(rng, depth)
    if atom in RANDOM_ANCHORS or rng.random() < 0.6:
        return atom
    quantifier = rng.choice(["*", "+", "?", "{2}", "{1,3}", "{2,}", "{,2}", "{0,1}"])
    r = rng.random()
    if r < 0.2:
        quantifier += "?"
    elif r < 0.3 and quantifier in ("*", "+", "?"):
        quantifier += "+"
    return atom + quantifier


def random_alternation(rng, depth):
    return "|".join("".join(random_quantified(rng, depth) for _ in range(rng.randint(1, 4)))
                    for _ in range(rng.randint(1, 3)))


def write_random(out_dir, num_patterns=400, num_texts=24):
    rng = random.Random(20240521)
    texts = [random_text(rng) for _ in range(num_texts)]
    patterns = []
    while len(patterns) < num_patterns:
        pattern = random_alternation(rng, 0)
        if rng.random() < 0.3:
            pattern = "(?i)" + pattern
        entry = {"name": f"random_{len(patterns)}", "pattern": pattern, "error": False,
                 "matches": []}
        try:
            Regex(pattern)
        except Exception:
            entry["error"] = True
            patterns.append(entry)
            continue
        try:
            entry["matches"] = [matches_of(pattern, text) for text in texts]
        except BaseException:  # onig gave up (retry limit): not a usable reference
            continue
        patterns.append(entry)
    with open(os.path.join(out_dir, "random.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": texts, "patterns": patterns}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"random: {len(patterns)} patterns, {len(texts)} texts")


NORMALIZATION_TEXTS = TEXTS + [
    "e\u0301 \u00e9 A\u030a \u212b \u00c5 \u1e9b\u0323 \u0071\u0307\u0323",
    "\ufb01 \ufb03 \u2460 \u00bd \u2075 \u33a1 \uff76\uff9e \u3000 \u00a0",
    "\ud55c\uae00 \u1100\u1161\u11ab \u0915\u093c \u0958",
    "Vi\u1ec7t Nam ti\u00ea\u0301ng vi\u00ea\u0323t",
    "\u2126 \u212a \u0344 \u0f73 \u2000 \u2029",
]

LOWERCASE_TEXTS = TEXTS + [
    "\u0130stanbul \u0049 \u0131",
    "\u03a3 \u03a3\u03a3 A\u03a3 A\u03a3B A\u03a3. A.\u03a3 \u1f08\u03a3 A\u0301\u03a3",
    "\u01c5 \u01c8 \u1e9e \u2c6f \u24b6 \u2160 \U00010400 \U0001e900",
    "\u0410\u0411\u0412 \u0531 \u10a0 \u13a0 \uff21",
]


def category_runs():
    runs = []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cn":
            continue
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] == cat:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, cat])
    return runs


def write_unicode(out_dir):
    forms = ("NFC", "NFD", "NFKC", "NFKD")
    data = {
        "unicode_version": unicodedata.unidata_version,
        "categories": category_runs(),
        "normalization": [
            dict(text=t, **{f.lower(): unicodedata.normalize(f, t) for f in forms})
            for t in NORMALIZATION_TEXTS
        ],
        "lowercase": [{"text": t, "lower": t.lower()} for t in LOWERCASE_TEXTS],
    }
    with open(os.path.join(out_dir, "unicode.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{len(data['categories'])} category runs (Unicode {unicodedata.unidata_version})")


def main():
    parser = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "fixtures", "regex"))
    args = parser.parse_args()
    patterns = []
    for name, pattern in MODEL_PATTERNS + FEATURE_PATTERNS:
        entry = {"name": name, "pattern": pattern, "error": False, "matches": []}
        try:
            Regex(pattern)
        except Exception:  # onig rejects the pattern
            entry["error"] = True
            patterns.append(entry)
            continue
        entry["matches"] = [matches_of(pattern, text) for text in TEXTS]
        patterns.append(entry)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "matches.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": TEXTS, "patterns": patterns}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    write_unicode(args.out)
    write_random(args.out)
    num_cases = sum(len(p["matches"]) for p in patterns)
    print(f"{len(patterns)} patterns, {len(TEXTS)} texts, {num_cases} cases")


if __name__ == "__main__":
    main()
