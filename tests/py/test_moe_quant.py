#!/usr/bin/env python3
"""Quantizing mixture-of-experts models, checked against transformers.

Random Mixtral (top 2 of 8, fp32), Qwen2-MoE (top 3 of 6 without renormalizing, a shared
expert with its sigmoid gate, fp32) and Qwen3-MoE (top 4 of 8, q/k norms, bf16) are built with
transformers and quantized by every method. For each output:

  * what is quantized: every expert's and the shared expert's gate/up/down are quantized, the
    router and the shared expert's gate stay float tensors (and are listed as not converted
    for the AWQ and bitsandbytes loaders);
  * our forward of the quantized file (test_forward --logits) equals transformers' forward of
    the same weights dequantized (GPTQ / AWQ unpacked here, NF4 from bitsandbytes' quant state
    and code table) and loaded back into its model, within 2e-5 of the largest logit;
  * the quantized model stays near the original (8-bit GPTQ much nearer than 4-bit; mean
    relative change, as a token whose top-k experts change moves a lot);
  * the report's routing: tokens per (layer, expert) add up to calibration tokens x top-k,
    and the experts below --moe-min-tokens are the ones that fell back to every token;
  * the fallback is the all-token mode: `--moe-min-tokens` above every count writes the same
    tensors as `--moe-calib all` (GPTQ true-sequential and not, AWQ, INT8: the passes that
    take the experts' down inputs again);
  * GPTQ gathering the experts' Hessians a few experts per true-sequential pass
    (`--moe-batch`) writes the same tensors as one pass for all.

transformers 5 stores experts as fused 3-D parameters, so its bitsandbytes / GPTQ / AWQ
integrations cannot load per-expert quantized experts (the layout vLLM and GPTQModel load):
that load is attempted and reported as n/a when it fails, never counted as a pass.
Skips (exit 77) without torch / transformers / safetensors / bitsandbytes or the built binaries."""
import json
import os
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import numpy as np
    import torch
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    from safetensors.torch import load_file, save_file
    from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig,
                              Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
except ImportError as e:
    lq_oracle.skip(f"{e}")

build, src = os.environ.get("LQ_BUILD"), os.environ.get("LQ_SRC", "")
if not build:
    lq_oracle.skip("LQ_BUILD not set")
fwd = os.path.join(build, "tests", "test_forward")
lq = os.environ.get("LQ_BIN") or os.path.join(build, "llmquant")
if not os.path.exists(fwd) or not os.path.exists(lq):
    lq_oracle.skip(f"{fwd} or {lq} not built")
tmp = os.environ.get("LQ_TMP") or tempfile.mkdtemp()
os.makedirs(tmp, exist_ok=True)
ex = os.path.join(src, "examples")
calib = ["--tokenizer", os.path.join(ex, "stories260K", "tokenizer.model"),
         "--calib", os.path.join(ex, "data", "tinystories_sample.txt"),
         "--nsamples", "8", "--seqlen", "64"]
NTOK = 8 * 64
failures = 0


def check(ok, msg):
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {msg}")
    failures += not ok


def random_model(cls, cfg, dtype, name, std=0.08):
    torch.manual_seed(sum(map(ord, name)))
    cfg._attn_implementation = "eager"
    m = cls(cfg).eval()
    with torch.no_grad():
        for n_, p in m.named_parameters():
            p.normal_(0.0, std)
            if "norm" in n_:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    d = os.path.join(tmp, name)
    m.to(dtype).save_pretrained(d, safe_serialization=True)
    return d, cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def ours(model_dir, ids):
    ids_path, out_path = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "logits.bin")
    ids.astype(np.int32).tofile(ids_path)
    r = subprocess.run([fwd, "--logits", model_dir, ids_path, str(ids.shape[0]), out_path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return np.fromfile(out_path, dtype=np.float32).reshape(ids.shape[0], ids.shape[1], -1)


def theirs(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()


def gptq_dequant(sd, p):
    qw, qz = sd[p + ".qweight"].numpy().view(np.uint32), sd[p + ".qzeros"].numpy().view(np.uint32)
    sc, gi = sd[p + ".scales"].float().numpy(), sd[p + ".g_idx"].numpy()
    bits = 32 * qw.shape[0] // len(gi)
    per, mask = 32 // bits, (1 << bits) - 1
    q = np.stack([(qw >> (bits * i)) & mask for i in range(per)], 1).reshape(-1, qw.shape[1])
    z = np.stack([(qz >> (bits * i)) & mask for i in range(per)], 2).reshape(qz.shape[0], -1)
    return torch.tensor(((q.astype(np.float32) - (z[gi] + 1)) * sc[gi]).T)


def awq_dequant(sd, p):
    order = [0, 4, 1, 5, 2, 6, 3, 7]

    def unpack(t):
        t = t.numpy().view(np.uint32)
        return np.stack([(t >> (4 * order[i])) & 15 for i in range(8)], -1).reshape(t.shape[0], -1)
    q, z = unpack(sd[p + ".qweight"]), unpack(sd[p + ".qzeros"])
    sc = sd[p + ".scales"].float().numpy()
    g = q.shape[0] // sc.shape[0]
    return torch.tensor(((q.astype(np.float32) - np.repeat(z, g, 0)) * np.repeat(sc, g, 0)).T)


def nf4_dequant(sd, p):
    """bitsandbytes' quant state of the file (absmax through its dequantize_blockwise when
    nested), codes looked up in blocks of the flattened weight. Not dequantize_4bit itself: on
    the CPU (bitsandbytes 0.50.2) it is wrong where a block spans two rows (in_features not a
    multiple of the block size; its own quantize_4bit -> dequantize_4bit round trip of a
    [64, 32] tensor errs by 0.19 where the flat-block formula gives 0.04). Products in float32,
    as our kernels compute them."""
    stats = {k[len(p) + len(".weight."):]: v for k, v in sd.items() if k.startswith(p + ".weight.")}
    w = bnb.nn.Params4bit.from_prequantized(data=sd[p + ".weight"], quantized_stats=stats,
                                            requires_grad=False, device="cpu")
    qs = w.quant_state
    am = qs.absmax
    if qs.nested:
        am = F.dequantize_blockwise(qs.absmax, qs.state2).float() + qs.offset
    b = w.data.view(-1)
    codes = torch.stack([(b >> 4) & 15, b & 15], 1).reshape(-1).long()
    bs = qs.blocksize
    vals = qs.code.float()[codes]
    n = vals.numel()
    vals = torch.nn.functional.pad(vals, (0, (-n) % bs)).reshape(-1, bs) * am.float()[:, None]
    return vals.reshape(-1)[:n].reshape(qs.shape)


def float_dir(qdir, dequant, name):
    """The quantized checkpoint with its quantized linears dequantized: a float model directory
    transformers loads (its converters fuse the per-expert tensors into 3-D parameters)."""
    sd = load_file(os.path.join(qdir, "model.safetensors"))
    quant = {k[: -len(s)] for k in sd for s in (".qweight", ".weight.absmax") if k.endswith(s)}
    state = {}
    for k, v in sd.items():
        p = k.rsplit(".", 1)[0]
        while p and p not in quant and "." in p:
            p = p.rsplit(".", 1)[0]
        if p not in quant or k == p + ".bias":  # the quantizer's tensors go, biases stay
            state[k] = v.float()
    for p in quant:
        state[p + ".weight"] = dequant(sd, p).contiguous()
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(qdir, "config.json")))
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32"
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return sd, d


def quantize(method, model, out, extra):
    r = subprocess.run([lq, "-q", method, model, "-o", out, "--force"] + extra,
                       capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"llmquant {method} {os.path.basename(model)} {' '.join(extra)}: "
                     f"{r.stderr.strip()}")
        return None
    return json.load(open(os.path.join(out, "llmquant_report.json")))


cases = [
    ("mixtral", MixtralForCausalLM, MixtralConfig(
        vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False), torch.float32,
     "block_sparse_moe", ("w1", "w3", "w2")),
    ("qwen2_moe", Qwen2MoeForCausalLM, Qwen2MoeConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32,
        shared_expert_intermediate_size=96, norm_topk_prob=False, use_sliding_window=False,
        tie_word_embeddings=False), torch.float32, "mlp", ("gate_proj", "up_proj", "down_proj")),
    ("qwen3_moe", Qwen3MoeForCausalLM, Qwen3MoeConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        num_experts=8, num_experts_per_tok=4, moe_intermediate_size=64, norm_topk_prob=True,
        use_sliding_window=False, tie_word_embeddings=False), torch.bfloat16, "mlp",
     ("gate_proj", "up_proj", "down_proj")),
]
# (method, options, dequantizer, bound on the max relative logit change from the original)
methods = [
    ("rtn", ["--group-size", "32"], gptq_dequant, 0.5),
    ("gptq", ["--group-size", "32"] + calib, gptq_dequant, 0.5),
    ("gptq", ["--group-size", "32", "--bits", "8", "--desc-act"] + calib, gptq_dequant, 0.05),
    ("awq", ["--group-size", "32"] + calib, awq_dequant, 0.5),
    ("nf4", [], nf4_dequant, 0.5),
]
rng = np.random.default_rng(7)
for name, cls, cfg, dtype, blk, leaves in cases:
    d, m = random_model(cls, cfg, dtype, name)
    E, K = cfg.num_local_experts if name == "mixtral" else cfg.num_experts, cfg.num_experts_per_tok
    shared = getattr(cfg, "shared_expert_intermediate_size", 0)
    ids = rng.integers(0, cfg.vocab_size, size=(2, 64))
    ref = theirs(m, ids)
    for method, extra, dequant, bound in methods:
        label = f"{name} {method} {' '.join(x for x in extra if x not in calib)}".strip()
        out = os.path.join(tmp, f"{name}_{method}_{len(extra)}")
        rep = quantize(method, d, out, extra)
        if rep is None:
            continue
        sd, fd = float_dir(out, dequant, f"{name}_{method}_{len(extra)}_float")
        keys = set(sd)
        want = [f"model.layers.{i}.{blk}.experts.{e}.{lf}" for i in range(cfg.num_hidden_layers)
                for e in range(E) for lf in leaves]
        if shared:
            want += [f"model.layers.{i}.mlp.shared_expert.{lf}" for i in range(cfg.num_hidden_layers)
                     for lf in leaves]
        qsuffix = ".weight.absmax" if method == "nf4" else ".qweight"
        missing = [w for w in want if w + qsuffix not in keys]
        floats = [f"model.layers.{i}.{blk}.gate.weight" for i in range(cfg.num_hidden_layers)]
        if shared:
            floats += [f"model.layers.{i}.mlp.shared_expert_gate.weight"
                       for i in range(cfg.num_hidden_layers)]
        bad_float = [f for f in floats if f not in keys or sd[f].dtype != torch.float16]
        check(not missing and not bad_float and rep["quantized_linears"] == len(want) +
              4 * cfg.num_hidden_layers and rep["unquantized_linears"] == 0,
              f"{label}: {rep['quantized_linears']} linears quantized, experts missing {missing[:2]}, "
              f"router / shared gate not fp16 {bad_float[:2]}")
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        skip = qc.get("modules_to_not_convert") or qc.get("llm_int8_skip_modules") or []
        if method in ("awq", "nf4"):
            check(f"{blk}.gate" in skip and (not shared or "mlp.shared_expert_gate" in skip),
                  f"{label}: router named in the loader's not-converted list {skip}")
        mq = cls.from_pretrained(fd, dtype=torch.float32, attn_implementation="eager").eval()
        a, b = ours(out, ids), theirs(mq, ids)
        diff, scale = float(np.abs(a - b).max()), float(np.abs(b).max())
        check(diff <= 2e-5 * scale, f"{label}: our forward of the file vs transformers on its "
                                    f"dequantized weights: max |logit diff| {diff:.3g} of {scale:.3g}")
        rel = float(np.abs(b - ref).mean() / np.abs(ref).mean())
        check(rel < bound, f"{label}: vs the original model, mean relative logit change {rel:.3g} "
                           f"(bound {bound})")
        if "experts" in rep and method != "rtn" and method != "nf4":
            ex_ = rep["experts"]
            sums = [sum(row) for row in ex_["tokens"]]
            fell = [[e for e in range(E) if row[e] < ex_["min_tokens"]] for row in ex_["tokens"]]
            check(sums == [NTOK * K] * cfg.num_hidden_layers and fell == ex_["all_tokens"],
                  f"{label}: routed tokens per layer {sums} (want {NTOK * K}), experts on every "
                  f"token {ex_['all_tokens']} = those under {ex_['min_tokens']} tokens")

    # the fallback is the all-token mode, wherever the passes take it
    for method, extra in (("gptq", ["--group-size", "32"]),
                          ("gptq", ["--group-size", "32", "--no-true-sequential"]),
                          ("awq", ["--group-size", "32"]), ("int8", [])):
        outs = []
        for opt in (["--moe-min-tokens", "1000000"], ["--moe-calib", "all"]):
            out = os.path.join(tmp, f"{name}_{method}_fb{len(outs)}")
            rep = quantize(method, d, out, extra + calib + opt)
            outs.append((rep, load_file(os.path.join(out, "model.safetensors")) if rep else None))
        if outs[0][1] is None or outs[1][1] is None:
            continue
        same = outs[0][1].keys() == outs[1][1].keys() and all(
            torch.equal(outs[0][1][k], outs[1][1][k]) for k in outs[0][1])
        n_all = [outs[i][0]["experts"]["all_token_experts"] for i in range(2)]
        check(same and n_all == [E * cfg.num_hidden_layers] * 2,
              f"{name} {method} {' '.join(extra)}: every expert under --moe-min-tokens gives the "
              f"tensors of --moe-calib all ({'same' if same else 'different'}; experts on every "
              f"token {n_all})")

    # experts' Hessians gathered a few experts per pass: the same tensors
    for extra in (["--group-size", "32"], ["--group-size", "32", "--desc-act"]):
        outs = []
        for opt in ([], ["--moe-batch", "3"]):
            out = os.path.join(tmp, f"{name}_gptq_batch{len(outs)}")
            rep = quantize("gptq", d, out, extra + calib + opt)
            outs.append(load_file(os.path.join(out, "model.safetensors")) if rep else None)
        if outs[0] is not None and outs[1] is not None:
            same = outs[0].keys() == outs[1].keys() and all(torch.equal(outs[0][k], outs[1][k])
                                                            for k in outs[0])
            check(same, f"{name} gptq {' '.join(extra)} --moe-batch 3: the tensors of one pass "
                        f"for all experts ({'same' if same else 'different'})")

    # routed and all-token statistics differ where the routing is uneven
    r0 = quantize("gptq", d, os.path.join(tmp, f"{name}_gptq_routed"),
                  ["--group-size", "32", "--moe-min-tokens", "0"] + calib)
    if r0:
        a = load_file(os.path.join(tmp, f"{name}_gptq_routed", "model.safetensors"))
        b = load_file(os.path.join(tmp, f"{name}_gptq_fb1", "model.safetensors"))
        k0 = f"model.layers.0.{blk}.experts.0.{leaves[2]}.qweight"
        check(r0["experts"]["all_token_experts"] == 0 and not torch.equal(a[k0], b[k0]),
              f"{name} gptq --moe-min-tokens 0: no expert on every token, codes differ from "
              f"--moe-calib all")

# transformers' own loaders of quantized checkpoints, for a per-expert file
import contextlib  # noqa: E402
import io  # noqa: E402
try:
    from transformers import AutoModelForCausalLM
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        AutoModelForCausalLM.from_pretrained(os.path.join(tmp, "qwen2_moe_nf4_0"),
                                             device_map="cpu")
    check(False, "transformers now loads a per-expert NF4 Qwen2-MoE: compare it here")
except Exception as e:  # noqa: BLE001 -- whatever transformers raises, it did not load
    print(f"n/a  transformers' bitsandbytes loader on per-expert experts: {type(e).__name__}: "
          f"{str(e).splitlines()[0][:120]}")

if failures:
    print(f"{failures} check(s) failed")
    sys.exit(1)
print("moe quantization: all checks passed")
