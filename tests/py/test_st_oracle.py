#!/usr/bin/env python3
"""Our safetensors writer is byte-identical to Python safetensors, and our reader accepts what
Python writes. Skips (exit 77) without numpy/safetensors."""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import save  # noqa: F401 (presence check)
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

build = os.environ.get("LQ_BUILD")
if not build:
    print("SKIP: LQ_BUILD not set")
    sys.exit(77)
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
        print("SKIP: byte comparison needs torch for bf16")
        sys.exit(77)
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
print("PASS")
