"""GGUF output (`llmquant rtn MODEL.gguf -o OUT.gguf --format gguf:TYPE`) against llama.cpp's own
llama-quantize, which the file must equal byte for byte for every type and mix offered:

  * a random Llama (transformers, hidden 256 so every k-quant applies, 8 layers for the layer
    rules of the _M / _S mixes, 8 query heads on 2 KV heads, untied output) through llama.cpp's
    convert_hf_to_gguf.py to F16 and to F32;
  * SmolLM2-135M (the real model, F16 from `llmquant convert` + convert_hf_to_gguf.py): tied
    embeddings, rows of 576 that are not whole 256-element blocks (llama-quantize's fallbacks);
  * the file sizes, and that gguf's Python reader reads every output with the tensor types the
    report names;
  * gptq on the types' own grids (`gptq --format gguf:Q4_K_M`, `Q2_K`): the header is
    llama-quantize's byte for byte (same types, sizes, offsets, metadata), every tensor GPTQ did
    not make too (embeddings, output, norms: ggml's rounding), GPTQ made every linear, and gguf's
    Python reader decodes each tensor to exactly what llmquant decodes (test_gguf --dump);
  * awq (`awq --format gguf:Q4_K_M`): the same, with the norms its scales were folded into;
  * llama.cpp's own llama-perplexity loads the gptq and awq files and computes a finite
    perplexity on them (the rtn files are llama-quantize's byte for byte).

llama-quantize comes from the llama.cpp build bench/build_llamacpp.sh makes (CI builds it);
without it, without the SmolLM2 GGUF or the Python packages: SKIP (FAIL under
LQ_REQUIRE_ORACLES=1)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import lq_oracle

try:
    import numpy as np
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    lq_oracle.skip(f"{e}")

build = os.environ.get("LQ_BUILD")
if not build:
    lq_oracle.skip("LQ_BUILD not set")
lq = os.environ.get("LQ_BIN") or os.path.join(build, "llmquant")
models = os.environ.get("LQ_MODELS") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llmquant", "models")
smol = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
llcpp = os.environ.get("LQ_LLAMACPP_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llmquant", "llama.cpp")
root = sorted(glob.glob(os.path.join(llcpp, "llama_cpp_python-*", "vendor", "llama.cpp")))
quantize = os.path.join(root[-1], "build", "bin", "llama-quantize") if root else ""
if not os.path.exists(smol):
    lq_oracle.skip(f"{smol} not cached: run scripts/fetch_models.sh")
if not quantize or not os.access(quantize, os.X_OK):
    lq_oracle.skip(f"no llama-quantize under {llcpp}: run bench/build_llamacpp.sh llama-quantize")
convert = os.path.join(root[-1], "convert_hf_to_gguf.py")
perplexity = os.path.join(root[-1], "build", "bin", "llama-perplexity")
text = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "data",
                    "tinystories_sample.txt")

tmp = os.environ.get("LQ_TMP") or tempfile.mkdtemp()
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
fail = 0


def report(ok, msg):
    global fail
    print(f"{'ok  ' if ok else 'FAIL'} {msg}", flush=True)
    fail += not ok


def loads_in_llamacpp(path, label):
    """llama-perplexity reads the file and scores two 128-token windows."""
    if not os.access(perplexity, os.X_OK):
        lq_oracle.skip_part(f"no llama-perplexity under {root[-1]}: run bench/build_llamacpp.sh "
                            "llama-quantize llama-perplexity")
        return
    r = run([perplexity, "-m", path, "-f", text, "-c", "128", "-b", "128", "--chunks", "2",
             "-t", "2"])
    m = [ln for ln in (r.stdout + r.stderr).splitlines() if "Final estimate: PPL =" in ln]
    v = float(m[-1].split("=")[1].split()[0]) if m else float("nan")
    report(r.returncode == 0 and np.isfinite(v) and v > 1,
           f"{label}: llama-perplexity loads it and scores {v:.2f} (rc {r.returncode})")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r


TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",
         "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16", "F32", "q4_k"]

# SmolLM2's tokenizer (49152 entries) for the random model too: convert_hf_to_gguf.py needs one
smol_hf = os.path.join(tmp, "smol-hf")
subprocess.run([lq, "-q", "convert", smol, "-o", smol_hf, "--force"], check=True)

torch.manual_seed(0)
rnd_hf = os.path.join(tmp, "rnd-hf")
cfg = LlamaConfig(vocab_size=49152, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=False, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
m = LlamaForCausalLM(cfg).eval()
with torch.no_grad():
    for n_, p_ in m.named_parameters():
        # heavy tails in some rows: the searches of the k-quants take their other branches
        p_.normal_(0, 0.05) if "norm" not in n_ else p_.copy_(1 + 0.1 * torch.randn_like(p_))
        if p_.dim() == 2:
            p_[::7] *= 20
m.save_pretrained(rnd_hf, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    if os.path.exists(os.path.join(smol_hf, f)):
        shutil.copy(os.path.join(smol_hf, f), rnd_hf)
del m

inputs = []
for name, hf, outtype in (("random-llama-f16", rnd_hf, "f16"), ("random-llama-f32", rnd_hf, "f32"),
                          ("smollm2-f16", smol_hf, "f16")):
    g = os.path.join(tmp, name + ".gguf")
    r = run([sys.executable, convert, hf, "--outtype", outtype, "--outfile", g])
    report(r.returncode == 0, f"convert_hf_to_gguf.py {name}")
    if r.returncode == 0:
        inputs.append((name, g))
shutil.rmtree(rnd_hf, ignore_errors=True)
shutil.rmtree(smol_hf, ignore_errors=True)

for name, g in inputs:
    if name == "random-llama-f32":
        types = ["Q4_0", "Q4_K_M", "Q6_K", "F16"]  # float32 input: the same code from f32 rows
    else:
        types = TYPES
    same, sizes = [], []
    for t in types:
        theirs, ours = os.path.join(tmp, "theirs.gguf"), os.path.join(tmp, "ours.gguf")
        for p in (theirs, ours):
            if os.path.exists(p):
                os.unlink(p)
        r1 = run([quantize, g, theirs, t, "2"])
        r2 = run([lq, "--json", "rtn", g, "-o", ours, "--format", "gguf:" + t])
        if r1.returncode or r2.returncode:
            report(False, f"{name} {t}: llama-quantize rc {r1.returncode}, llmquant rc {r2.returncode}")
            continue
        a, b = open(theirs, "rb").read(), open(ours, "rb").read()
        ok = a == b
        if not ok:
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            report(False, f"{name} {t}: differs from llama-quantize's at byte {first} "
                   f"(sizes {len(a)} / {len(b)})")
            continue
        rep = json.loads(r2.stdout.strip().splitlines()[-1])
        rd = gguf.GGUFReader(ours)
        seen = {}
        for x in rd.tensors:
            seen[x.tensor_type.name] = seen.get(x.tensor_type.name, 0) + 1
        ok = seen == rep["tensor_types"] and rep["output_bytes"] == len(b)
        report(ok, f"{name} {t}: byte-identical to llama-quantize ({len(b)} bytes; "
               f"{', '.join(f'{k} x{v}' for k, v in sorted(seen.items()))}"
               + ("" if ok else f"; report says {rep['tensor_types']}, {rep['output_bytes']} bytes")
               + ")")
        same.append(t)
        sizes.append(len(b))
    print(f"{name}: {len(same)} of {len(types)} types byte-identical")

# calibrated methods on the types' own grids
tg = os.path.join(build, "tests", "test_gguf")
try:
    from safetensors.numpy import load_file
except ImportError as e:
    lq_oracle.skip(f"{e}")
g16 = dict(inputs).get("random-llama-f16")
LINEARS = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
           "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def calibrated(method, t, folds):
    """A calibrated method's file against llama-quantize's of the same type: the header and
    every tensor the method does not make byte for byte (folds: awq's norms differ, carrying
    its scales), gguf decoding every tensor as llmquant does, llama.cpp loading it."""
    theirs, ours = os.path.join(tmp, "theirs.gguf"), os.path.join(tmp, "ours.gguf")
    for p in (theirs, ours):
        if os.path.exists(p):
            os.unlink(p)
    r1 = run([quantize, g16, theirs, t, "2"])
    r2 = run([lq, "--json", method, g16, "-o", ours, "--format", "gguf:" + t, "--nsamples", "8",
              "--seqlen", "256"])
    if r1.returncode or r2.returncode:
        report(False, f"{method} {t}: llama-quantize rc {r1.returncode}, llmquant rc {r2.returncode}")
        return
    rep = json.loads(r2.stdout.strip().splitlines()[-1])
    ra, rb = gguf.GGUFReader(theirs), gguf.GGUFReader(ours)
    a, b = open(theirs, "rb").read(), open(ours, "rb").read()
    hdr = ra.data_offset == rb.data_offset and a[:ra.data_offset] == b[:rb.data_offset]
    same = {x.name for x, y in zip(ra.tensors, rb.tensors) if x.data.tobytes() == y.data.tobytes()}
    linears = [x.name for x in ra.tensors if x.name.startswith("blk.") and x.name.endswith(LINEARS)]
    norms = [x.name for x in ra.tensors
             if folds and x.name.endswith(("attn_norm.weight", "ffn_norm.weight"))]
    rest_same = all(x.name in same for x in ra.tensors if x.name not in linears + norms)
    folded = sum(1 for n_ in norms if n_ not in same)
    ok = (hdr and len(a) == len(b) and rest_same and len(linears) == 56 and
          folded == len(norms) == (16 if folds else 0) and
          rep["tensors_from_method"] == len(linears) + len(norms))
    report(ok, f"{method} {t}: header and the {len(ra.tensors) - len(linears) - len(norms)} other "
           f"tensors byte-identical to llama-quantize's, {rep['tensors_from_method']} tensors from "
           f"the method ({sum(1 for n_ in linears if n_ in same)} linears equal to "
           f"round-to-nearest, {folded} norms carry folded scales)")
    dump = os.path.join(tmp, "dump")
    subprocess.run([tg, "--dump", ours, dump], check=True, capture_output=True)
    mine = load_file(os.path.join(dump, "model.safetensors"))
    bad = [x.name for x in rb.tensors if not np.array_equal(
        gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
            [int(d) for d in reversed(x.shape)]).view(np.uint32), mine[x.name].view(np.uint32))]
    report(not bad, f"{method} {t}: gguf dequantizes all {len(rb.tensors)} tensors bit for bit as "
           f"llmquant does" + (f"; differ {bad[:3]}" if bad else ""))
    shutil.rmtree(dump, ignore_errors=True)
    loads_in_llamacpp(ours, f"{method} {t}")


# gptq on the types' own grids; awq folds its scales into the norms (written from the layer)
# and rounds the linears with ggml's search, the scaled inputs' mean squares as importance
for method, t, folds in ([("gptq", "Q4_K_M", 0), ("gptq", "Q2_K", 0), ("awq", "Q4_K_M", 1)]
                         if g16 else []):
    calibrated(method, t, folds)

# refusals: an unknown type, a method that does not write GGUF, a foreign output
g = inputs[0][1] if inputs else smol
bad = os.path.join(tmp, "x.gguf")
r = run([lq, "rtn", g, "-o", bad, "--format", "gguf:Q7_Z"])
report(r.returncode == 2 and not os.path.exists(bad) and "Q7_Z" in r.stderr,
       f"unknown type refused (rc {r.returncode}), nothing written")
r = run([lq, "nf4", g, "-o", bad, "--format", "gguf:Q4_K_M"])
report(r.returncode == 9 and not os.path.exists(bad), f"nf4 -> GGUF refused (rc {r.returncode})")
r = run([lq, "gptq", g, "-o", bad, "--format", "gguf:Q4_K_M", "--desc-act"])
report(r.returncode == 2 and not os.path.exists(bad), f"gptq --desc-act -> GGUF refused (rc {r.returncode})")
r = run([lq, "rtn", g, "-o", bad, "--format", "gguf:Q4_0", "--group-size", "64"])
report(r.returncode == 2 and not os.path.exists(bad) and "--group-size" in r.stderr,
       f"an option the GGUF type decides is refused, not ignored (rc {r.returncode})")
with open(bad, "w") as f:
    f.write("not a gguf\n")
r = run([lq, "rtn", g, "-o", bad, "--format", "gguf:Q4_0", "--force"])
report(r.returncode == 12 and open(bad).read() == "not a gguf\n",
       f"--force leaves a file that is not GGUF alone (rc {r.returncode})")
r = run([lq, "rtn", g, "-o", g, "--format", "gguf:Q4_0", "--force"])
report(r.returncode == 2, f"the input as output refused (rc {r.returncode})")
left = [p for p in os.listdir(tmp) if ".lqtmp" in p or ".lqwork" in p]
report(not left, f"no temporary files left ({left[:3]})")

shutil.rmtree(tmp, ignore_errors=True)
print("FAILED" if fail else "all passed")
sys.exit(1 if fail else 0)
