#!/usr/bin/env python3
"""Perplexity of a Hugging Face model directory with transformers, GPTQ protocol (gptq/llama.py
llama_eval): the text tokenized once by the directory's tokenizer, non-overlapping windows of
CTX tokens, each scored on its CTX - 1 next-token predictions; only the first CHUNKS windows
(0 = all), like `llmquant ppl --chunks`. The side of the comparison that is not llmquant.

usage: bench/ppl_transformers.py MODEL_DIR TEXT [CTX=2048] [CHUNKS=0]   (float32, eager, CPU)"""
import math
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

model_dir, text_file = sys.argv[1], sys.argv[2]
ctx = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
chunks = int(sys.argv[4]) if len(sys.argv) > 4 else 0
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                             attn_implementation="eager").eval()
ids = tok(open(text_file, encoding="utf-8").read(), return_tensors="pt").input_ids[0]
n = ids.numel() // ctx
if chunks > 0:
    n = min(n, chunks)
nll, t0 = 0.0, time.time()
with torch.no_grad():
    for w in range(n):
        x = ids[w * ctx:(w + 1) * ctx][None]
        logits = model(x).logits.double()
        lp = torch.log_softmax(logits[0, :-1], -1)
        nll -= lp.gather(-1, x[0, 1:, None]).sum().item()
scored = n * (ctx - 1)
print(f"ppl {math.exp(nll / scored):.4f} (transformers, {n} windows of {ctx}, {scored} tokens "
      f"scored, {ids.numel()} in the text, {time.time() - t0:.0f} s)")
