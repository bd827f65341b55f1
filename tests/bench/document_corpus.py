#!/usr/bin/env python3
"""A real corpus of documents for ringtrain-bench's packed-documents item: the Python sources of
the venv's torch (one file, one document), a Llama 3-style byte-level BPE trained on some of them
with Hugging Face's `tokenizers` (tests/parity/tokenizer_reference.py's trainer), and the list of
the other files to tokenize with ringtrain-tokenize --eos-id. Run on the project's .venv.

  document_corpus.py --out-dir D [--train-bytes N] [--corpus-bytes M] [--vocab V]

Writes D/tokenizer.json, D/files.txt (the corpus files, one path a line, in sorted order) and
prints one JSON line: {"tokenizer", "files", "eos_id", "vocab_size", "corpus_bytes"}.
"""
import argparse
import json
import os
import sys
import sysconfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from tokenizer_reference import LLAMA3_PATTERN, SPECIAL, train  # noqa: E402
from tokenizers import Regex, pre_tokenizers  # noqa: E402


def torch_sources():
    root = os.path.join(sysconfig.get_paths()["purelib"], "torch")
    paths = []
    for folder, _, names in os.walk(root):
        paths += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    return sorted(p for p in paths if os.path.getsize(p) > 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--train-bytes", type=int, default=2 << 20)
    ap.add_argument("--corpus-bytes", type=int, default=4 << 20)
    ap.add_argument("--vocab", type=int, default=16000)
    ns = ap.parse_args()
    os.makedirs(ns.out_dir, exist_ok=True)
    files = torch_sources()
    if not files:
        sys.exit("document_corpus: no torch .py files in the venv")
    # Every other file trains the tokenizer until train_bytes, the rest make the corpus.
    train_files, corpus, used, size = [], [], 0, 0
    for i, path in enumerate(files):
        n = os.path.getsize(path)
        if i % 2 == 0 and used < ns.train_bytes:
            train_files.append(path)
            used += n
        elif size < ns.corpus_bytes:
            corpus.append(path)
            size += n
    text_path = os.path.join(ns.out_dir, "train.txt")
    with open(text_path, "w", encoding="utf-8") as out:
        for path in train_files:
            with open(path, encoding="utf-8", errors="replace") as f:
                out.write(f.read())
    tok = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ]), text_path, ns.vocab)
    tokenizer = os.path.join(ns.out_dir, "tokenizer.json")
    tok.save(tokenizer)
    files_txt = os.path.join(ns.out_dir, "files.txt")
    with open(files_txt, "w") as f:
        f.write("".join(p + "\n" for p in corpus))
    print(json.dumps({"tokenizer": tokenizer, "files": files_txt, "eos_id": tok.token_to_id(SPECIAL),
                      "vocab_size": tok.get_vocab_size(), "corpus_bytes": size}))


if __name__ == "__main__":
    main()
