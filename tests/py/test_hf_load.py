"""Outputs load unchanged in transformers: `llmquant nf4` and `llmquant int8` checkpoints of
stories260K and of a random Phi-3 (fused qkv_proj / gate_up_proj) opened with
AutoModelForCausalLM.from_pretrained (bitsandbytes Linear4bit / Linear8bitLt on the CPU), their
NLL on in-distribution text compared with the original model's.


The text is sampled from the original model (stories260K's own distribution; no Python port
of its llama2.c tokenizer is needed). That the tensors dequantize bit-exactly like the
reference libraries is test_format_compat.py's job; this test checks the whole checkpoint
(config + tensors) loads and computes.

Bounds (stories260K, measured): NF4 +18% ppl and INT8 +0.1% on TinyStories; here NF4 must stay
within +35% NLL and INT8 within +2% NLL of the original on the generated text.
GPTQ / AWQ checkpoints need optimum + gptqmodel (CUDA builds) to load in transformers; their
tensors and config are checked against AutoGPTQ / AutoAWQ code in test_format_compat.py.
Skips (exit 77) when torch, transformers or bitsandbytes is missing."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import torch
    import transformers
    import bitsandbytes  # noqa: F401
    from transformers import AutoModelForCausalLM
except ImportError as e:  # pragma: no cover
    lq_oracle.skip("%s" % e)

shared = os.environ.get("LQ_SHARED", "")
lq_bin = os.environ.get("LQ_BIN", "")
model = os.path.join(shared, "models", "stories260K")
if not os.path.isdir(model) or not os.path.exists(lq_bin):
    lq_oracle.skip("LQ_SHARED / LQ_BIN not set")
tok = os.path.join(model, "llama2c", "tok512.bin")
calib = os.path.join(shared, "data", "wikitext2", "wiki.valid.tokens")
if not os.path.exists(calib):
    calib = "builtin"  # the built-in corpus holds WikiText-2 validation

failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def nll(m, ids):
    with torch.no_grad():
        return m(ids, labels=ids).loss.item()


torch.manual_seed(0)
orig = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32)
with torch.no_grad():
    gen = orig.generate(torch.tensor([[1]]), max_new_tokens=255, do_sample=True, top_k=20,
                        temperature=0.8, pad_token_id=0)
ids = gen[:, :256]
base = nll(orig, ids)
print("original: NLL %.4f on %d generated tokens" % (base, ids.shape[1]))

tmp = tempfile.mkdtemp(prefix="lq_hf_load_")
try:
    cases = [
        ("nf4", [], 0.35, "Linear4bit"),
        ("int8", ["--tokenizer", tok, "--calib", calib, "--nsamples", "16", "--seqlen", "256"],
         0.02, "Linear8bitLt"),
    ]
    for method, extra, bound, cls in cases:
        out = os.path.join(tmp, method)
        r = subprocess.run([lq_bin, method, model, "-o", out, "-q"] + extra,
                           capture_output=True, text=True)
        check(r.returncode == 0, "llmquant %s exit %d %s" % (method, r.returncode, r.stderr))
        if r.returncode:
            continue
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        check(isinstance(qc["llm_int8_threshold"], float), "%s: llm_int8_threshold is a float" % method)
        q = AutoModelForCausalLM.from_pretrained(out, device_map="cpu")
        # bitsandbytes >= 0.49 repacks 4-bit weights for its AVX512-BF16 CPU kernel on the first
        # forward and asserts out_features % 32 == 0 there (functional.py
        # _convert_weight_packed_for_cpu); stories260K's MLP has 172 outputs. The generic CPU
        # path computes the same thing from the same tensors, so take it.
        for mod in q.modules():
            if hasattr(mod, "support_avx512bf16_for_cpu"):
                mod.support_avx512bf16_for_cpu = False
        lin = q.model.layers[0].self_attn.q_proj
        check(type(lin).__name__ == cls, "%s: q_proj loads as %s (got %s)" % (method, cls,
                                                                          type(lin).__name__))
        v = nll(q, ids)
        check(v <= base * (1 + bound) and v >= base * 0.9,
              "%s in transformers %s: NLL %.4f vs original %.4f (%+.2f%%, bound +%.0f%%)"
              % (method, transformers.__version__, v, base, 100 * (v / base - 1), 100 * bound))
    # Phi-3: the fused qkv_proj and gate_up_proj, quantized as stored, load as bitsandbytes
    # layers too (a random model; its own samples as the text)
    from transformers import Phi3Config, Phi3ForCausalLM
    torch.manual_seed(1)
    pcfg = Phi3Config(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    pm = Phi3ForCausalLM(pcfg).eval()
    with torch.no_grad():
        for p_ in pm.parameters():
            p_.normal_(0.0, 0.08)
        for n_, p_ in pm.named_parameters():
            if "norm" in n_:
                p_.fill_(1.0)
    pdir = os.path.join(tmp, "phi3")
    pm.save_pretrained(pdir, safe_serialization=True)
    with torch.no_grad():
        pids = pm.generate(torch.tensor([[1]]), max_new_tokens=127, do_sample=True, top_k=20,
                           pad_token_id=0)[:, :128]
    pbase = nll(pm, pids)
    ptok = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "stories260K", "tokenizer.model")
    for method, extra, bound, cls in cases:
        out = os.path.join(tmp, "phi3-" + method)
        extra = [a if a != tok else ptok for a in extra] or ["--tokenizer", ptok]
        r = subprocess.run([lq_bin, method, pdir, "-o", out, "-q"] + extra,
                           capture_output=True, text=True)
        check(r.returncode == 0, "llmquant %s on Phi-3 exit %d %s" % (method, r.returncode, r.stderr))
        if r.returncode:
            continue
        q = AutoModelForCausalLM.from_pretrained(out, device_map="cpu")
        for mod in q.modules():
            if hasattr(mod, "support_avx512bf16_for_cpu"):
                mod.support_avx512bf16_for_cpu = False
        names = [type(q.model.layers[0].self_attn.qkv_proj).__name__,
                 type(q.model.layers[0].mlp.gate_up_proj).__name__]
        check(names == [cls, cls], "%s: Phi-3 qkv_proj / gate_up_proj load as %s (got %s)"
              % (method, cls, names))
        v = nll(q, pids)
        check(v <= pbase * (1 + bound) and v >= pbase * 0.9,
              "%s Phi-3 in transformers: NLL %.4f vs original %.4f (%+.2f%%, bound +%.0f%%)"
              % (method, v, pbase, 100 * (v / pbase - 1), 100 * bound))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print("test_hf_load: %d failures" % len(failures))
    sys.exit(1)
print("test_hf_load: outputs load in transformers %s / bitsandbytes %s"
      % (transformers.__version__, bitsandbytes.__version__))
