"""Reference token ids for tests/test_tok_spm.c and tests/test_tok_hf.c, from the reference
implementations (sentencepiece 0.2.x, tokenizers 0.2x). Regenerate with

    python3 tests/data/tok/gen_vectors.py ../shared

Writes into tests/data/tok/:
  llama2_spm.jsonl, llama2_spm_wikitext2.json      sentencepiece on Llama-2 tokenizer.model
  llama2_legacy.json.zst                           Llama-2 tokenizer.json as published (BPE with
                                                   merges from the pieces' scores, Prepend+Replace
                                                   normalizer, byte fallback, <s> template),
                                                   rebuilt from tokenizer.model; zstd -19
  bl_llama3.json, bl_gpt2.json                     small byte-level BPE tokenizers trained here
                                                   on wiki.valid.tokens: Llama-3 style (NFC, Split
                                                   regex, ByteLevel, ignore_merges, BOS template)
                                                   and GPT-2 style (ByteLevel with its regex and
                                                   add_prefix_space, no BOS)
  <name>.jsonl, <name>_wikitext2.json              tokenizers' ids for each (no special tokens)
Each .jsonl line is {"text", "ids"} for the edge cases and the first lines of wiki.test.raw;
each _wikitext2.json holds the id count and FNV-1a 64 (int32 little endian) of the whole
WikiText-2 test join."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
here = os.path.dirname(os.path.abspath(__file__))
model = os.path.join(shared, "tokenizers/llama2/tokenizer.model")

edge = ["", " ", "  ", "a", " a", "a ", "  a  b  ", "\n", "\n\n", "\t tab", "Hello world",
        "Hello  world\n\nfoo", "123456789 3.14159 1,000,000", "don't can't it's I'M YOU'LL",
        "naïve café résumé", "e\u0301 combining", "日本語のテキスト", "中文测试", "한국어",
        "emoji 🤗🚀👍🏽 mix", "ZWJ 👨‍👩‍👧", "\u00a0nbsp\u2009thin", "<s> </s> <unk>", "<0x0A>",
        "▁▁already", "a" * 300, "ab" * 150, " " * 50, "\x7f\x01", "Ω≈ç√∫", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "@-@ , . ; : ! ? ( ) [ ] { } \" '", "==== Section ====", "e.g. i.e. U.S.A.",
        "😀" * 10, "mixed 中 english 字", "line\r\nwindows\r\n", "  leading\n  spaces\n",
        "ﬁ ligature ①"]
lines = open(os.path.join(shared, "data/wikitext2/wiki.test.raw"), encoding="utf-8").read().split("\n")
join = open(os.path.join(shared, "data/wikitext2/wikitext2_test_hf_join.txt"), encoding="utf-8").read()


def fnv(ids):
    h = 0xcbf29ce484222325
    for b in b"".join(struct.pack("<i", i) for i in ids):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def write(name, enc, nlines, version):
    with open(os.path.join(here, name + ".jsonl"), "w", encoding="utf-8") as f:
        for t in edge + lines[:nlines]:
            f.write(json.dumps({"text": t, "ids": enc(t)}, ensure_ascii=False) + "\n")
    ids = enc(join)
    json.dump({"file": "data/wikitext2/wikitext2_test_hf_join.txt", "n": len(ids),
               "fnv1a64": fnv(ids), "reference": version},
              open(os.path.join(here, name + "_wikitext2.json"), "w"), indent=1)
    print(name, len(ids), "ids")


# 1. sentencepiece
sp = spm.SentencePieceProcessor(model_file=model)
write("llama2_spm", sp.encode, 300, "sentencepiece " + spm.__version__)

# 2. Llama-2 tokenizer.json (transformers LlamaConverter, legacy layout)
import tokenizers
m = pb.ModelProto()
m.ParseFromString(open(model, "rb").read())
vocab = {p.piece: i for i, p in enumerate(m.pieces)}
merges = []
for p in m.pieces:
    local = [(p.piece[:i], p.piece[i:], p.score) for i in range(1, len(p.piece))
             if p.piece[:i] in vocab and p.piece[i:] in vocab]
    merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
merges = [(a, b) for a, b, _ in sorted(merges, key=lambda v: v[2], reverse=True)]
tk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
tk.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<unk>", "<s>", "</s>")])
tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                  special_tokens=[("<s>", 1)])
with tempfile.TemporaryDirectory() as d:
    tk.save(os.path.join(d, "t.json"))
    subprocess.run(["zstd", "-q", "-19", "-f", os.path.join(d, "t.json"), "-o",
                    os.path.join(here, "llama2_legacy.json.zst")], check=True)
tk.encode_special_tokens = True  # special tokens are not parsed from text (lq_tok_encode)
write("llama2_legacy", lambda t: tk.encode(t, add_special_tokens=False).ids, 300,
      "tokenizers " + tokenizers.__version__)

# 3. byte-level BPEs trained on WikiText-2 validation text
valid = os.path.join(shared, "data/wikitext2/wiki.valid.tokens")
L3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
      r"|\s*[\r\n]+|\s+(?!\S)|\s+")
for name in ("bl_llama3", "bl_gpt2"):
    tk = Tokenizer(models.BPE(ignore_merges=name == "bl_llama3"))
    if name == "bl_llama3":
        tk.normalizer = normalizers.NFC()
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(L3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special = ["<|begin_of_text|>", "<|end_of_text|>"]
    else:
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        special = ["<|endoftext|>"]
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=special,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tk.train([valid], tr)
    if name == "bl_llama3":
        tk.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tk.token_to_id("<|begin_of_text|>"))])
    tk.save(os.path.join(here, name + ".json"))
    tk.encode_special_tokens = True
    write(name, lambda t: tk.encode(t, add_special_tokens=False).ids, 100,
          "tokenizers " + tokenizers.__version__)
