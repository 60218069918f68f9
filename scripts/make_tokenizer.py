#!/usr/bin/env python3
"""Build the tiny Qwen3.5-style tokenizer fixture under models/tokenizer/.

A byte-level BPE with the Qwen3.5 layout (NFC normaliser, the Qwen3.5 pre-tokenizer split regex,
GPT-2 byte map, no BOS) and the 26 Qwen3.5 special tokens appended after the ordinary vocabulary in
the Qwen order (<|endoftext|>, <|im_start|>, <|im_end|>, …, <think>, </think>), 1024 tokens in
all. The merges are trained on a fixed set of CPython standard-library sources (code + English
docstrings), so the vocabulary is deterministic for a given Python minor version.

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.22.1
    /tmp/tokvenv/bin/python scripts/make_tokenizer.py [OUT_DIR]

Writes tokenizer.json and tokenizer_config.json (chat_template.jinja is hand-written, not generated).
"""
import json
import os
import sys
import sysconfig

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers, AddedToken

TOTAL = 1024
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
         r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# (token, special) in Qwen3.5 id order; <tool_call>/<think> are added but not "special", as in Qwen3.
SPECIALS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
CORPUS = ["textwrap.py", "argparse.py", "difflib.py", "shlex.py", "json/decoder.py",
          "json/encoder.py", "unittest/case.py", "pathlib.py", "subprocess.py", "dataclasses.py"]


def corpus():
    lib = sysconfig.get_paths()["stdlib"]
    for name in CORPUS:
        with open(os.path.join(lib, name), encoding="utf-8") as f:
            yield f.read()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "models", "tokenizer")
    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=TOTAL - len(SPECIALS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus(), trainer=trainer)
    base = tok.get_vocab_size()
    assert base == TOTAL - len(SPECIALS), base
    tok.add_tokens([AddedToken(t, special=s, normalized=False, single_word=False, lstrip=False, rstrip=False)
                    for t, s in SPECIALS])
    assert tok.get_vocab_size() == TOTAL
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    # Mark the special flags exactly (add_tokens keeps them; re-read to be sure of the id order).
    data = json.load(open(os.path.join(out, "tokenizer.json")))
    ids = {a["content"]: a["id"] for a in data["added_tokens"]}
    assert [ids[t] for t, _ in SPECIALS] == list(range(base, TOTAL)), ids
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "model_max_length": 262144,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": {str(ids[t]): {"content": t, "special": s, "normalized": False,
                                               "lstrip": False, "rstrip": False, "single_word": False}
                                 for t, s in SPECIALS},
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"wrote {out}: {base} BPE tokens + {len(SPECIALS)} special = {TOTAL}")


if __name__ == "__main__":
    main()
