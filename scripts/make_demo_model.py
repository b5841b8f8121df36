#!/usr/bin/env python3
"""Build the demo model that travels with the repository, examples/stories260K/, from the shared
test data (run once by a developer; the output is committed):

  config.json, model.safetensors   copied from shared/models/stories260K (Karpathy's tinyllamas
                                   stories260K in Hugging Face layout, MIT)
  tokenizer.model                  SentencePiece model proto rebuilt from llama2c/tok512.bin with
                                   sentencepiece's own protobuf classes: the 512 pieces and
                                   scores, piece types (<unk> UNKNOWN, <s>/</s> CONTROL, <0xXX>
                                   BYTE, the rest NORMAL, ' ' back to U+2581), BPE with byte
                                   fallback, the identity normalizer with a dummy prefix and no
                                   whitespace squeezing -- how llama2.c's tokenizer (and the
                                   train_vocab.sh run that made it) treats text
  tokenizer_config.json            for transformers' LlamaTokenizer
  ../data/tinystories_sample.txt   the in-domain text for the perplexity check (MIT)

tests/test_tokenizer.c checks the rebuilt tokenizer.model id for id against tok512.bin (our
llama2.c encoder) on the demo text and WikiText-2, and tests/py/test_tok_oracle.py against the
sentencepiece library itself.

usage: scripts/make_demo_model.py SHARED_DIR OUT_DIR   (default ../shared examples/stories260K)
needs: sentencepiece, protobuf"""
import json
import os
import shutil
import struct
import sys

from sentencepiece import sentencepiece_model_pb2 as spm

shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
out = sys.argv[2] if len(sys.argv) > 2 else "examples/stories260K"
src = os.path.join(shared, "models", "stories260K")
os.makedirs(out, exist_ok=True)

with open(os.path.join(src, "llama2c", "tok512.bin"), "rb") as f:
    blob = f.read()
(max_len,) = struct.unpack_from("<i", blob, 0)
pos, pieces = 4, []
while pos < len(blob):
    score, n = struct.unpack_from("<fi", blob, pos)
    pos += 8
    pieces.append((blob[pos:pos + n].decode("utf-8"), score))
    pos += n
assert len(pieces) == 512, len(pieces)

m = spm.ModelProto()
T = spm.ModelProto.SentencePiece
for i, (text, score) in enumerate(pieces):
    p = m.pieces.add()
    p.score = score
    if i == 0:
        p.piece, p.type = "<unk>", T.UNKNOWN
    elif i == 1:
        assert text == "\n<s>\n", repr(text)
        p.piece, p.type = "<s>", T.CONTROL
    elif i == 2:
        assert text == "\n</s>\n", repr(text)
        p.piece, p.type = "</s>", T.CONTROL
    elif 3 <= i < 259:
        assert text == "<0x%02X>" % (i - 3), (i, text)
        p.piece, p.type = text, T.BYTE
    else:
        p.piece, p.type = text.replace(" ", "\u2581"), T.NORMAL
ts = m.trainer_spec
ts.model_type = spm.TrainerSpec.BPE
ts.vocab_size = 512
ts.byte_fallback = True
ts.split_digits = True
ts.allow_whitespace_only_pieces = True
ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = 0, 1, 2, -1
ns = m.normalizer_spec
ns.name = "identity"
ns.add_dummy_prefix = True
ns.remove_extra_whitespaces = False
ns.escape_whitespaces = True
with open(os.path.join(out, "tokenizer.model"), "wb") as f:
    f.write(m.SerializeToString())

for name in ("config.json", "model.safetensors"):
    shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
               "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": True,
               "model_max_length": 512, "clean_up_tokenization_spaces": False}, f, indent=2)
    f.write("\n")
data = os.path.join(os.path.dirname(os.path.abspath(out)), "data")
os.makedirs(data, exist_ok=True)
shutil.copyfile(os.path.join(shared, "data", "tinystories", "tinystories_sample.txt"),
                os.path.join(data, "tinystories_sample.txt"))
print(f"wrote {out} and {data}/tinystories_sample.txt")
