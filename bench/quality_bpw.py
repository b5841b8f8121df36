#!/usr/bin/env python3
"""Bits per weight of a model's decoder-layer linears (bench/quality.sh): the bytes of every
tensor of the decoder layers except norms (codes, scales, zeros, g_idx, NF4 statistics, 16-bit
weights left unquantized) x 8, over the parameter count of those linears in the float model.

    quality_bpw.py BASE_DIR MODEL      MODEL: a checkpoint directory or a .gguf
"""
import glob, json, os, struct, sys


def st_tensors(d):
    """name -> (bytes, numel) from the safetensors headers of a directory."""
    out = {}
    for f in glob.glob(os.path.join(d, "*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        for k, v in h.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            numel = 1
            for x in v["shape"]:
                numel *= x
            out[k] = (b - a, numel)
    return out


def decoder_linear(name):
    return (".layers." in name or name.startswith("blk.")) and "norm" not in name


base = {k: v for k, v in st_tensors(sys.argv[1]).items() if decoder_linear(k)}
params = sum(numel for _, numel in base.values())
model = sys.argv[2]
if model.endswith(".gguf"):
    import gguf
    r = gguf.GGUFReader(model)
    nbytes = sum(int(t.n_bytes) for t in r.tensors if decoder_linear(t.name))
else:
    nbytes = sum(b for k, (b, _) in st_tensors(model).items() if decoder_linear(k))
print(f"{nbytes * 8 / params:.4f}")
