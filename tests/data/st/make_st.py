#!/usr/bin/env python3
"""Generates the Python-written checkpoints in tests/data/st/ (committed, so the C tests read
real reference output without Python):
    python3 tests/data/st/make_st.py tests/data/st
Every value follows a formula the C test recomputes (see tests/test_safetensors.c):
  py_dtypes.safetensors   safetensors.torch.save_file, one tensor per dtype, metadata format=pt;
                          element j of tensor "t_<DTYPE>" = st_value(j) cast to that dtype
  hf_tiny_sharded/        transformers LlamaForCausalLM.save_pretrained(max_shard_size=6000):
                          config.json + model-0000i-of-0000N.safetensors + index; parameter p
                          (sorted by name) element j = ((j * 7 + p * 3) % 17 - 8) / 8 in bfloat16.
"""
import os
import sys

import torch
from safetensors.torch import save_file

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def st_value(n):
    j = torch.arange(n, dtype=torch.float64)
    return (j % 11 - 5) * 0.5  # exact in every float dtype, small ints after truncation


dtypes = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
          "U8": torch.uint8, "BOOL": torch.bool}
tensors = {}
for i, (name, dt) in enumerate(dtypes.items()):
    shape = (3, 5) if i % 2 == 0 else (2, 2, 3)
    n = shape[0] * shape[1] * (shape[2] if len(shape) > 2 else 1)
    v = st_value(n)
    if dt == torch.uint8:
        v = v + 5  # non-negative
    tensors["t_" + name] = v.to(dt).reshape(shape)
save_file(tensors, os.path.join(out, "py_dtypes.safetensors"), metadata={"format": "pt"})

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

cfg = LlamaConfig(hidden_size=16, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=48, max_position_embeddings=64,
                  tie_word_embeddings=False, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
with torch.no_grad():
    for p, (name, prm) in enumerate(sorted(model.named_parameters())):
        j = torch.arange(prm.numel(), dtype=torch.float64)
        prm.copy_((((j * 7 + p * 3) % 17 - 8) / 8).reshape(prm.shape).to(prm.dtype))
d = os.path.join(out, "hf_tiny_sharded")
model.save_pretrained(d, max_shard_size=6000)
for f in os.listdir(d):
    if f not in ("config.json", "model.safetensors.index.json") and not f.endswith(".safetensors"):
        os.remove(os.path.join(d, f))  # generation_config.json: not ours to test
