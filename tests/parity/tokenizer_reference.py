#!/usr/bin/env python3
"""The reference for ringtrain's C++ tokenizer (tests/integration/tokenizer_parity_test.cc):
Hugging Face's `tokenizers` (tests/parity/requirements.txt). Run on the project's .venv.

  make-fixture --out-dir D
      writes D/train.txt (a small multilingual text), trains a byte-level BPE on it and writes
        D/llama3.json    Split(Llama 3's pattern, "Isolated") then ByteLevel(use_regex=False), as
                         Llama 3 ships, with ignore_merges (Llama 3 sets it)
        D/gpt2.json      ByteLevel(use_regex=True): GPT-2's pattern, no ignore_merges
        D/llama3.tiktoken  the Llama 3-style vocabulary as tiktoken lines "base64(bytes) id"
        D/corpus.txt     text to encode: accents, CJK, emoji, whitespace runs, tabs, CR/LF,
                         digit runs, contractions, the special token inline
  encode --tokenizer F --text T --out ids.bin [--special-as-text]
      encode(T, add_special_tokens=False) -> little-endian uint32 ids; --special-as-text encodes
      added tokens in T as plain text (a tiktoken file has none to match)
  decode --tokenizer F --ids ids.bin --out text.bin
      decode(ids, skip_special_tokens=False) of little-endian uint32 ids -> the text's UTF-8 bytes
      (invalid UTF-8 in the tokens' bytes already replaced by U+FFFD, as the library does)
  bench --tokenizer F --text T
      prints tokens/s of `tokenizers` on one thread (for the README's comparison)
"""
import argparse
import base64
import json
import os
import random
import struct
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = "<|endoftext|>"

WORDS = [
    "the", "model", "trains", "context", "parallel", "ring", "attention", "token", "sequence",
    "café", "naïve", "résumé", "Ångström", "façade", "über", "Straße", "niño", "jalapeño",
    "東京", "大阪", "学习", "模型", "注意力", "日本語", "한국어", "Привет", "мир", "Ελλάδα",
    "😀", "🚀", "👍🏽", "🇫🇷", "e\u0301", "I'm", "we'll", "they've", "it's", "DON'T", "x=1;",
    "#include", "{}", "()", "->", "//", "...", "$100", "3.14159", "2026", "1234567", "v0.23",
]


def training_text(rng):
    lines = []
    for _ in range(3000):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        sep = rng.choice([" ", " ", " ", "  ", "\t", ", "])
        line = sep.join(words)
        if rng.random() < 0.2:
            line += " " + str(rng.randint(0, 10**rng.randint(1, 7)))
        lines.append(line)
    return "\n".join(lines) + "\n"


def corpus_text():
    return (
        "Hello world! The café's naïve résumé cost $1234567.89 in 2026.\n"
        "\tTabbed line\twith\t\ttabs,   three spaces, and trailing spaces   \n"
        "\n\n\n"
        "Windows line\r\nendings\r\n"
        "東京と大阪で学习模型の注意力を試す。日本語のテキスト、한국어 텍스트。\n"
        "Emoji: 😀🚀👍🏽 flags 🇫🇷🇯🇵 and zwj 👩‍💻 end\n"
        f"first document{SPECIAL}second document {SPECIAL} third\n"
        "Digits 1 12 123 1234 12345 0000000 3.14159 v0.23.3 x=1;y=22;\n"
        "I'm sure we'll see they've it's DON'T WE'LL Mixed'S\n"
        "Combining e\u0301 vs é, Ångström, Straße, ПРИВЕТ мир, Ελλάδα\n"
        "    indented code {\n        return a->b(c) // comment\n    }\n"
        "unseen words: zygote quixotic 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑∫√ ½ ¾\u3000ideographic space\n"
        "trailing whitespace at the very end   \n  "
    )


def train(pre_tokenizer, text_path, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([text_path], trainer)
    return tok


def byte_decoder():
    # GPT-2's bytes_to_unicode, inverted: the printable Latin-1 bytes stand for themselves.
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
            + list(range(0xAE, 0xFF + 1)))
    shown, n = {}, 0
    for b in range(256):
        if b in keep:
            shown[b] = chr(b)
        else:
            shown[b] = chr(256 + n)
            n += 1
    return {c: b for b, c in shown.items()}


def make_fixture(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(17)
    train_path = os.path.join(out_dir, "train.txt")
    with open(train_path, "w", encoding="utf-8", newline="") as f:
        f.write(training_text(rng))
    with open(os.path.join(out_dir, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(corpus_text())

    llama3 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ]), train_path, 800)
    spec = json.loads(llama3.to_str())
    spec["model"]["ignore_merges"] = True
    with open(os.path.join(out_dir, "llama3.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)

    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), train_path, 600)
    gpt2.save(os.path.join(out_dir, "gpt2.json"))

    # tiktoken: every vocabulary token but the special one, its bytes and its id as the rank.
    decode = byte_decoder()
    with open(os.path.join(out_dir, "llama3.tiktoken"), "w", encoding="ascii") as f:
        for shown, rank in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1]):
            if shown == SPECIAL:
                continue
            raw = bytes(decode[c] for c in shown)
            f.write(f"{base64.b64encode(raw).decode('ascii')} {rank}\n")


def encode(tokenizer_path, text_path, out_path, special_as_text):
    tok = Tokenizer.from_file(tokenizer_path)
    tok.encode_special_tokens = special_as_text
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    ids = tok.encode(text, add_special_tokens=False).ids
    with open(out_path, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}I", *ids))


def decode(tokenizer_path, ids_path, out_path):
    tok = Tokenizer.from_file(tokenizer_path)
    with open(ids_path, "rb") as f:
        raw = f.read()
    ids = list(struct.unpack(f"<{len(raw) // 4}I", raw))
    with open(out_path, "wb") as f:
        f.write(tok.decode(ids, skip_special_tokens=False).encode("utf-8"))


def bench(tokenizer_path, text_path):
    os.environ["RAYON_NUM_THREADS"] = "1"
    tok = Tokenizer.from_file(tokenizer_path)
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    start = time.perf_counter()
    n = len(tok.encode(text, add_special_tokens=False).ids)
    seconds = time.perf_counter() - start
    print(f"tokenizers: {n} tokens in {seconds:.2f} s: {n / seconds:.0f} tokens/s")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make-fixture")
    p.add_argument("--out-dir", required=True)
    p = sub.add_parser("encode")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--text", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--special-as-text", action="store_true")
    p = sub.add_parser("decode")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--ids", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("bench")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--text", required=True)
    args = parser.parse_args()
    if args.command == "make-fixture":
        make_fixture(args.out_dir)
    elif args.command == "encode":
        encode(args.tokenizer, args.text, args.out, args.special_as_text)
    elif args.command == "decode":
        decode(args.tokenizer, args.ids, args.out)
    else:
        bench(args.tokenizer, args.text)


if __name__ == "__main__":
    sys.exit(main())
