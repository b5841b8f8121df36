#!/usr/bin/env python3
"""Our safetensors writer is byte-identical to Python safetensors, and our reader accepts what
Python writes. Skips (exit 77) without numpy/safetensors."""
import os
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import numpy as np
    from safetensors.numpy import save  # noqa: F401 (presence check)
except ImportError as e:
    lq_oracle.skip(f"{e}")

build = os.environ.get("LQ_BUILD")
if not build:
    lq_oracle.skip("LQ_BUILD not set")
exe = os.path.join(build, "tests", "test_safetensors")

specs = [("z.weight", np.float16, (3, 5)), ("a.bias", np.float32, (7,)), ("m.qweight", np.int32, (2, 4)),
         ("b.weight", "bf16", (2, 2, 2)), ("c.codes", np.uint8, (9,)), ("d.cb", np.int8, (2, 3)),
         ("e.idx", np.int64, (3,)), ("empty", np.float32, (0,)), ("f.w", np.float16, (1,))]
tensors = {}
for i, (name, dt, shape) in enumerate(specs):
    n = int(np.prod(shape))
    j = np.arange(n)
    if dt == np.uint8:
        v = ((j * 29) % 256).astype(np.uint8)
    elif dt == np.int8:
        v = (j % 13 - 6).astype(np.int8)
    elif dt == np.int32:
        v = ((j % 13 - 6) * 100000).astype(np.int32)
    elif dt == np.int64:
        v = ((j % 13 - 6).astype(np.int64) << 40)
    elif dt == "bf16":
        f = ((j % 13) - 6 + 0.25 * i).astype(np.float32)
        v = (f.view(np.uint32) >> 16).astype(np.uint16)  # exact values: truncation == rounding
    else:
        v = ((j % 13) - 6 + 0.25 * i).astype(dt)
    tensors[name] = v.reshape(shape)

with tempfile.TemporaryDirectory() as d:
    subprocess.run([exe, "--write-oracle", d], check=True)
    ours = open(os.path.join(d, "model.safetensors"), "rb").read()
    # numpy has no bfloat16, so the comparison uses safetensors.torch (skipped without torch).
    # Only one metadata key: Python keeps metadata in a per-process randomized HashMap.
    try:
        import torch
        from safetensors.torch import save as tsave
        tt = {k: (torch.from_numpy(v.astype(np.int16)).view(torch.bfloat16) if k == "b.weight"
                  else torch.from_numpy(v)) for k, v in tensors.items()}
        theirs = tsave(tt, metadata={"format": "pt"})
        kind = "safetensors.torch"
    except ImportError:
        tensors.pop("b.weight")
        print("note: torch absent, bf16 tensor excluded from the byte comparison")
        theirs = None
        kind = "safetensors.numpy"
    if theirs is None:
        lq_oracle.skip("byte comparison needs torch for bf16")
    if ours != theirs:
        n = min(len(ours), len(theirs))
        first = next((i for i in range(n) if ours[i] != theirs[i]), n)
        print(f"FAIL: bytes differ from {kind} at offset {first} (ours {len(ours)} B, theirs {len(theirs)} B)")
        print("ours  :", ours[:first + 80][-160:])
        print("theirs:", theirs[:first + 80][-160:])
        sys.exit(1)
    print(f"byte-identical to {kind}: {len(ours)} bytes")

    # Python reads ours back value for value.
    from safetensors.torch import load_file as tload
    back = tload(os.path.join(d, "model.safetensors"))
    for k, v in tt.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and bool((back[k] == v).all()), k

# Sharded writing: the same dict sharded by huggingface_hub (what transformers' save_pretrained
# calls), each shard saved by safetensors, the index as transformers 4 writes it.
try:
    from huggingface_hub import split_torch_state_dict_into_shards
except ImportError:
    lq_oracle.skip("huggingface_hub absent, sharded comparison not run")
import json  # noqa: E402

spec = [("model.embed_tokens.weight", torch.bfloat16, (64, 16)),
        ("model.layers.0.self_attn.q_proj.weight", torch.float16, (16, 16)),
        ("model.layers.0.self_attn.q_proj.bias", torch.float32, (16,)),
        ("model.layers.0.mlp.qweight", torch.int32, (4, 40)),
        ("model.layers.0.mlp.scales", torch.float16, (2, 40)),
        ("model.layers.0.mlp.g_idx", torch.int32, (16,)),
        ("model.layers.1.big", torch.float32, (40, 40)),
        ("model.layers.1.codes", torch.uint8, (300,)),
        ("model.norm.weight", torch.float32, (16,)),
        ("lm_head.weight", torch.bfloat16, (64, 16)),
        ("z.empty", torch.float32, (0,))]
sd = {}
for i, (name, dt, shape) in enumerate(spec):
    j = torch.arange(int(np.prod(shape)), dtype=torch.int64)
    if dt == torch.int32:
        v = ((5 * j + i) % 23 - 11).to(dt)
    elif dt == torch.uint8:
        v = ((5 * j + i) % 256).to(dt)
    else:
        v = (((5 * j + i) % 23 - 11).to(torch.float64) / 8).to(dt)
    sd[name] = v.reshape(shape)

from safetensors.torch import save_file  # noqa: E402

for max_shard, arg in ((4096, "4096"), (10**12, "0"), (3000, "3000")):
    with tempfile.TemporaryDirectory() as ours_d, tempfile.TemporaryDirectory() as ref_d:
        subprocess.run([exe, "--write-oracle-sharded", ours_d, arg], check=True)
        split = split_torch_state_dict_into_shards(sd, filename_pattern="model{suffix}.safetensors",
                                                   max_shard_size=max_shard)
        for fn, names in split.filename_to_tensors.items():
            save_file({n: sd[n] for n in names}, os.path.join(ref_d, fn), metadata={"format": "pt"})
        if split.is_sharded:
            index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
            with open(os.path.join(ref_d, "model.safetensors.index.json"), "w") as f:
                f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
        a, b = sorted(os.listdir(ours_d)), sorted(os.listdir(ref_d))
        if a != b:
            print(f"FAIL max_shard={max_shard}: files {a} vs reference {b}")
            sys.exit(1)
        for fn in a:
            x = open(os.path.join(ours_d, fn), "rb").read()
            y = open(os.path.join(ref_d, fn), "rb").read()
            if x != y:
                print(f"FAIL max_shard={max_shard}: {fn} differs ({len(x)} vs {len(y)} bytes)")
                print(x[:300])
                print(y[:300])
                sys.exit(1)
        print(f"max_shard={max_shard}: {len(a)} files byte-identical to huggingface_hub + safetensors")

# Every malformed file of tests/data/bad is refused by Python safetensors as well ("limit_"
# files are valid safetensors beyond our own limits).
from safetensors import safe_open  # noqa: E402

bad_dir = os.path.join(os.environ.get("LQ_TEST_DATA", ""), "bad")
if os.path.isdir(bad_dir):
    n = 0
    for fn in sorted(os.listdir(bad_dir)):
        if not fn.endswith(".safetensors") or fn.startswith("limit_"):
            continue
        try:
            with safe_open(os.path.join(bad_dir, fn), "np") as h:
                list(h.keys())
            print(f"FAIL: Python safetensors accepts {fn}, which we reject")
            sys.exit(1)
        except Exception:
            n += 1
    print(f"{n} bad files: Python safetensors rejects each too")
print("PASS")
