#!/usr/bin/env python3
"""bitsandbytes' own NF4 conversion through transformers (bench/quality.sh's bitsandbytes row).

    quality_bnb.py BASE_DIR OUT_DIR

Loads BASE_DIR with BitsAndBytesConfig(load_in_4bit, nf4, double quant: what `llmquant nf4`
writes by default) on the CPU and saves it with save_pretrained, so that the same evaluator
(`llmquant ppl`) scores bitsandbytes' file next to llmquant's. Every linear of the decoder is
quantized; the embedding and lm_head stay as transformers leaves them (16-bit).
"""
import os
import shutil
import sys
import time

import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

base, out = sys.argv[1:3]
t0 = time.time()
cfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                         bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32)
m = AutoModelForCausalLM.from_pretrained(base, quantization_config=cfg, device_map="cpu",
                                         dtype=torch.float16)
m.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"):
    if os.path.exists(f"{base}/{f}") and not os.path.exists(f"{out}/{f}"):
        shutil.copyfile(f"{base}/{f}", f"{out}/{f}")
print(f"bitsandbytes NF4: {time.time() - t0:.1f} s")
