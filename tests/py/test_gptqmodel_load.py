"""Mixed-precision GPTQ checkpoints load unchanged in GPTQModel and compute llmquant's logits.

`llmquant gptq --target-bpw` writes per-module bits and group sizes as GPTQModel / vLLM
"dynamic" rules, and (every GPTQ checkpoint that keeps linears in float) a "-:" rule for those:
GPTQModel and vLLM skip a module only by such a rule, and without it GPTQModel refuses the file
("Missing required quantized weights"). stories260K, act-order, a plan over 4-bit g32 / g64 and
8-bit g64 (its MLP, 172 wide, stays in float): GPTQModel 7.7's loader (torch kernel, CPU) must
give every quantized module the bits and group size of llmquant's plan
(llmquant_report.json), leave the MLP a plain Linear, and its float32 logits must match
llmquant's own forward (tests/test_forward --logits) on random token windows.

Skips (exit 77) when torch, numpy or gptqmodel is missing (a failure under LQ_REQUIRE_ORACLES=1).
"""
import json
import os
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import numpy as np
    import torch
    from gptqmodel import BACKEND, GPTQModel
except ImportError as e:  # pragma: no cover
    lq_oracle.skip("%s" % e)

lq_bin = os.environ.get("LQ_BIN", "")
build = os.environ.get("LQ_BUILD", "")
# the bundled copy: it carries tokenizer.model, which GPTQModel's loader opens
model = os.path.join(os.environ.get("LQ_SRC", ""), "examples", "stories260K")
fwd = os.path.join(build, "tests", "test_forward")
if not os.path.isdir(model) or not os.path.exists(lq_bin) or not os.path.exists(fwd):
    lq_oracle.skip("LQ_SRC / LQ_BIN / LQ_BUILD (tests/test_forward) not set")
os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(os.cpu_count() or 1))

failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


tmp = os.environ.get("LQ_TMP") or tempfile.mkdtemp(prefix="lq_gptqmodel_")
os.makedirs(tmp, exist_ok=True)
out = os.path.join(tmp, "mixed")
# 13.2 bits per weight over the attention linears (the MLP is float either way): measured to
# give a plan with all three choices, so both a bits and a group-size override are written
r = subprocess.run([lq_bin, "-q", "gptq", model, "-o", out, "--force", "--group-size", "64",
                    "--bpw-bits", "4g32,4,8", "--target-bpw", "13.2", "--desc-act",
                    "--nsamples", "8", "--seqlen", "256"], capture_output=True, text=True)
if r.returncode:
    print("FAIL llmquant gptq exit %d: %s" % (r.returncode, r.stderr))
    sys.exit(1)
qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
rules = qc.get("dynamic", {})
check(any(k.startswith("-:") for k in rules), "a \"-:\" rule for the float MLP: %s" % list(rules))
check(any("bits" in v for v in rules.values()) and any("group_size" in v for v in rules.values()),
      "the plan overrides both bits and group size: %s" % list(rules.values()))

# llmquant's plan: module name -> (bits, group size)
plan = {}
units = {"self_attn.qkv": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
         "self_attn.o_proj": ["self_attn.o_proj"], "mlp.gate_up": ["mlp.gate_proj", "mlp.up_proj"],
         "mlp.down_proj": ["mlp.down_proj"]}
rep = json.load(open(os.path.join(out, "llmquant_report.json")))
for u in rep["mixed_precision"]["units"]:
    for leaf in units[u["unit"]]:
        plan["model.layers.%d.%s" % (u["layer"], leaf)] = (u["bits"], u["group_size"])
check(len(plan) == 20, "the report plans the 20 attention linears (%d)" % len(plan))

m = GPTQModel.load(out, device="cpu", backend=BACKEND.TORCH, dtype=torch.float16)
m.model.float()  # the torch kernel loads in 16 bits only; its float32 forward is compared
seen = 0
for name, mod in m.model.named_modules():
    if not name.endswith("_proj"):
        continue
    if name in plan:
        got = (getattr(mod, "bits", None), getattr(mod, "group_size", None))
        seen += 1
        if got != plan[name]:
            check(False, "%s: GPTQModel bits / group size %s, llmquant's plan %s" %
                  (name, got, plan[name]))
    else:
        check(type(mod) is torch.nn.Linear, "%s stays a float Linear (%s)" %
              (name, type(mod).__name__))
check(seen == len(plan) and not failures, "GPTQModel gave %d modules the plan's bits and group "
      "size" % seen)

torch.manual_seed(0)
ids = torch.randint(3, 512, (2, 96))
with torch.no_grad():
    theirs = m.model(ids).logits.float().numpy()
ids_path, lg_path = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "logits.bin")
ids.numpy().astype(np.int32).tofile(ids_path)
r = subprocess.run([fwd, "--logits", out, ids_path, "2", lg_path], capture_output=True, text=True)
check(r.returncode == 0, "test_forward --logits exit %d %s" % (r.returncode, r.stderr[-300:]))
if r.returncode == 0:
    ours = np.fromfile(lg_path, dtype=np.float32).reshape(theirs.shape)
    d, top = float(np.abs(ours - theirs).max()), float(np.abs(theirs).max())
    # float32 both sides, different summation orders: measured 1.6e-5 of 17.6
    check(d <= 1e-5 * top * 10, "logits: max |diff| %.3g of max |logit| %.3g" % (d, top))

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("all checks passed")
