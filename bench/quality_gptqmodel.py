#!/usr/bin/env python3
"""GPTQModel's GPTQ on llmquant's own calibration windows (bench/quality.sh).

    quality_gptqmodel.py BASE_DIR WINDOWS OUT_DIR key=value...

WINDOWS: the windows.lqc a `llmquant gptq --cache-dir` run wrote (the token ids it calibrated
with; layout in quant/lq_calib_cache.c: a 40-byte header with the dims, then one zstd frame of the
int32 ids split into byte planes). key=value: QuantizeConfig fields (Python literals), on top of
damp_percent=0.01, sym=True, act_group_aware=False (as llmquant's defaults). Float32 compute.
"""
import ast, os, struct, sys

import numpy as np
import torch
import zstandard
from gptqmodel import GPTQModel, QuantizeConfig


def read_windows(path):
    b = open(path, "rb").read()
    nsamples, seqlen = struct.unpack_from("<2q", b, 8)
    nvals, zlen = struct.unpack_from("<QQ", b, 40)
    raw = zstandard.ZstdDecompressor().decompress(b[56:56 + zlen], max_output_size=nvals * 4)
    planes = np.frombuffer(raw, np.uint8).reshape(4, nvals)
    return planes.T.copy().view("<i4").reshape(nsamples, seqlen)


base, win, out = sys.argv[1:4]
kw = dict(damp_percent=0.01, sym=True, act_group_aware=False)
for a in sys.argv[4:]:
    k, v = a.split("=", 1)
    kw[k] = ast.literal_eval(v)
ids = read_windows(win)
calib = [{"input_ids": torch.tensor(r, dtype=torch.long).unsqueeze(0),
          "attention_mask": torch.ones(1, len(r), dtype=torch.long)} for r in ids]
model = GPTQModel.load(base, QuantizeConfig(**kw), device="cpu", torch_dtype=torch.float32)
model.quantize(calib, batch_size=1)
model.save(out)
