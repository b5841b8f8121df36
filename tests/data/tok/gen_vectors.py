"""Reference token ids for tests/test_tok_spm.c, from the reference implementation.

    python3 tests/data/tok/gen_vectors.py ../shared     (sentencepiece 0.2.x)

writes tests/data/tok/llama2_spm.jsonl: {"text", "ids"} per case (no BOS) for the first 300
lines of WikiText-2 wiki.test.raw and edge cases, and llama2_spm_wikitext2.json: id count and
FNV-1a 64 of the ids (int32 little endian) of the whole WikiText-2 test join."""
import json
import os
import struct
import sys

import sentencepiece as spm

shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
here = os.path.dirname(os.path.abspath(__file__))
sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "tokenizers/llama2/tokenizer.model"))

edge = ["", " ", "  ", "a", " a", "a ", "  a  b  ", "\n", "\n\n", "\t tab", "Hello world",
        "Hello  world\n\nfoo", "123456789 3.14159 1,000,000", "don't can't it's",
        "naïve café résumé", "日本語のテキスト", "中文测试", "한국어", "emoji 🤗🚀👍🏽 mix",
        "ZWJ 👨‍👩‍👧", "\u00a0nbsp\u2009thin", "<s> </s> <unk>", "<0x0A>", "▁▁already",
        "a" * 300, "ab" * 150, " " * 50, "\x7f\x01", "Ω≈ç√∫", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "@-@ , . ; : ! ? ( ) [ ] { } \" '", "==== Section ====", "e.g. i.e. U.S.A.",
        "😀" * 10, "mixed 中 english 字"]
lines = open(os.path.join(shared, "data/wikitext2/wiki.test.raw"), encoding="utf-8").read().split("\n")
cases = edge + lines[:300]
with open(os.path.join(here, "llama2_spm.jsonl"), "w", encoding="utf-8") as f:
    for t in cases:
        f.write(json.dumps({"text": t, "ids": sp.encode(t)}, ensure_ascii=False) + "\n")

text = open(os.path.join(shared, "data/wikitext2/wikitext2_test_hf_join.txt"), encoding="utf-8").read()
ids = sp.encode(text)
h = 0xcbf29ce484222325
for b in b"".join(struct.pack("<i", i) for i in ids):
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
json.dump({"file": "data/wikitext2/wikitext2_test_hf_join.txt", "n": len(ids),
           "fnv1a64": "%016x" % h, "sentencepiece": spm.__version__},
          open(os.path.join(here, "llama2_spm_wikitext2.json"), "w"), indent=1)
print(len(cases), "cases;", len(ids), "ids for the WikiText-2 test join")
