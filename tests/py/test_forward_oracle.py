#!/usr/bin/env python3
"""Our float32 CPU forward (quant/model/lq_model*.c, driven through `test_forward --logits`) against
transformers' own models (torch, float32, eager attention):

  * stories260K (the real checkpoint): logits of two 160-token sequences and the per-window NLL;
  * small random models covering what stories260K does not: Llama with GQA, attention and MLP
    biases, an untied lm_head and llama3 RoPE scaling, stored in bf16; Qwen2 (q/k/v bias, tied
    embeddings) with linear RoPE scaling in fp32; Mistral with a sliding window shorter than the
    sequence, head_dim set explicitly, in fp16; Qwen3 (per-head q/k RMSNorm before RoPE, head_dim
    wider than hidden / heads, untied) in bf16; Gemma 2 (alternating sliding / full layers,
    attention and final logit soft-capping, query_pre_attn_scalar, (1 + w) and post norms, GeGLU,
    scaled embeddings) in bf16; Gemma 3 (q/k norms, layer_types, two RoPE bases with linear
    scaling on the full layers only) in fp32, also quantized by `llmquant awq` (norm folding with
    the (1 + w) convention) and dequantized back into transformers; Phi-3 (fused qkv_proj and
    gate_up_proj, LongRoPE with its attention factor: short factors within the original length,
    long ones beyond, a sliding window) in bf16 and fp32, quantized by `llmquant awq` (the v rows
    of qkv_proj and the up rows of gate_up_proj take the previous-op scales) and by `llmquant
    gptq --desc-act` (one Hessian and one g_idx per fused linear), both dequantized back;
    mixture of experts: Mixtral (top 2 of 8, renormalized), Qwen2-MoE (top 3 of 6 without
    renormalizing, a shared expert with its sigmoid gate, q/k/v biases) in fp32 and Qwen3-MoE
    (top 4 of 8 renormalized, q/k norms) in bf16.

Skips (exit 77) without torch / transformers / safetensors or without the built test binary."""
import json
import os
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import numpy as np
    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                              Gemma2Config, Gemma2ForCausalLM, Gemma3TextConfig,
                              Gemma3ForCausalLM, Phi3Config, Phi3ForCausalLM, MixtralConfig,
                              MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)
except ImportError as e:
    lq_oracle.skip(f"{e}")

build, shared = os.environ.get("LQ_BUILD"), os.environ.get("LQ_SHARED")
if not build:
    lq_oracle.skip("LQ_BUILD not set")
exe = os.path.join(build, "tests", "test_forward")
if not os.path.exists(exe):
    lq_oracle.skip(f"{exe} not built")
tmp = os.environ.get("LQ_TMP") or tempfile.mkdtemp()
os.makedirs(tmp, exist_ok=True)
torch.manual_seed(0)
failures = 0


def ours(model_dir, ids, max_tokens=None):
    """ids: int array [nseq, seqlen] -> our logits [nseq, seqlen, vocab]."""
    nseq, seqlen = ids.shape
    ids_path, out_path = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "logits.bin")
    ids.astype(np.int32).tofile(ids_path)
    cmd = [exe, "--logits", model_dir, ids_path, str(nseq), out_path]
    if max_tokens:
        cmd.append(str(max_tokens))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stderr}")
    return np.fromfile(out_path, dtype=np.float32).reshape(nseq, seqlen, -1)


def theirs(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()


def nll(logits, ids):
    """Mean NLL of each sequence's next-token predictions (float64)."""
    lg = torch.tensor(logits, dtype=torch.float64)
    lp = torch.log_softmax(lg[:, :-1], -1)
    tgt = torch.tensor(ids[:, 1:], dtype=torch.long)
    return (-lp.gather(-1, tgt[..., None])[..., 0]).mean(-1).numpy()


def compare(name, model_dir, model, ids, rel_tol, max_tokens=None):
    global failures
    a, b = ours(model_dir, ids, max_tokens), theirs(model, ids)
    diff = float(np.abs(a - b).max())
    scale = float(np.abs(b).max())
    dn = float(np.abs(nll(a, ids) - nll(b, ids)).max())
    ok = diff <= rel_tol * scale and dn <= 1e-4
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max |logit diff| {diff:.3g} (max |logit| {scale:.3g}), "
          f"max per-sequence NLL diff {dn:.3g}")
    failures += not ok


# ---- stories260K -----------------------------------------------------------------------------
st = os.path.join(shared or "", "models", "stories260K")
if shared and os.path.exists(os.path.join(st, "model.safetensors")):
    m = LlamaForCausalLM.from_pretrained(st, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(1)
    ids = rng.integers(3, 512, size=(2, 160))
    ids[:, 0] = 1
    compare("stories260K, 2 x 160 tokens", st, m, ids, 1e-5)
    compare("stories260K, one sequence per chunk", st, m, ids, 1e-5, max_tokens=160)
else:
    lq_oracle.skip_part("stories260K not under LQ_SHARED")


# ---- random small models ---------------------------------------------------------------------
def random_model(cls, cfg, dtype, name, std=0.25):
    """Random weights large enough that attention is not uniform, saved in `dtype`; returned
    in float32 as loaded back from the file (what our loader reads)."""
    torch.manual_seed(sum(map(ord, name)))  # hash() of a str changes with every process
    m = cls(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, std)
        gemma = "Gemma" in cls.__name__  # RMSNorm scales by (1 + w)
        for n_, p in m.named_parameters():
            if "norm" in n_:
                p.copy_((0.0 if gemma else 1.0) + 0.1 * torch.randn_like(p))
    d = os.path.join(tmp, name)
    m.to(dtype).save_pretrained(d, safe_serialization=True)
    return d, cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


cases = [
    ("llama_gqa_bias_untied_llama3_bf16", LlamaForCausalLM, LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        attention_bias=True, mlp_bias=True, tie_word_embeddings=False, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}), torch.bfloat16, 96),
    ("qwen2_tied_linear_rope_f32", Qwen2ForCausalLM, Qwen2Config(
        vocab_size=300, hidden_size=64, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
        tie_word_embeddings=True, use_sliding_window=False,
        rope_parameters={"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}),
     torch.float32, 96),
    ("mistral_window16_head_dim_f16", MistralForCausalLM, MistralConfig(
        vocab_size=300, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        sliding_window=16, tie_word_embeddings=False), torch.float16, 80),
    ("qwen3_qk_norm_head_dim_bf16", Qwen3ForCausalLM, Qwen3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        tie_word_embeddings=False, use_sliding_window=False, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}), torch.bfloat16, 96),
    ("gemma2_softcap_window16_bf16", Gemma2ForCausalLM, Gemma2Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
        max_position_embeddings=256, sliding_window=16, attn_logit_softcapping=4.0,
        final_logit_softcapping=5.0, rms_norm_eps=1e-6), torch.bfloat16, 80),
    ("gemma3_layer_types_two_bases_f32", Gemma3ForCausalLM, Gemma3TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
        max_position_embeddings=256, sliding_window=16,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
        rms_norm_eps=1e-6), torch.float32, 80),
    # 80 tokens > original 32: the long factors; GQA and a window shorter than the sequence
    ("phi3_longrope_long_window_bf16", Phi3ForCausalLM, Phi3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        original_max_position_embeddings=32, sliding_window=24, pad_token_id=0,
        bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0 + 0.1 * i for i in range(8)],
                         "long_factor": [1.5 + 0.7 * i for i in range(8)]}), torch.bfloat16, 80),
    # 64 tokens <= original 128: the short factors, still times the attention factor; no GQA
    ("phi3_longrope_short_mha_f32", Phi3ForCausalLM, Phi3Config(
        vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
        original_max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0 + 0.3 * i for i in range(8)],
                         "long_factor": [2.0 + 0.5 * i for i in range(8)]}), torch.float32, 64),
    # mixture of experts: routing (softmax, top-k, renormalized or not), experts in index order,
    # Qwen2-MoE's shared expert and its sigmoid gate, Mixtral's block_sparse_moe names
    ("mixtral_top2of8_f32", MixtralForCausalLM, MixtralConfig(
        vocab_size=512, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=False), torch.float32, 64),
    ("qwen2_moe_shared_top3of6_f32", Qwen2MoeForCausalLM, Qwen2MoeConfig(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32,
        shared_expert_intermediate_size=80, norm_topk_prob=False, use_sliding_window=False,
        tie_word_embeddings=False), torch.float32, 64),
    ("qwen3_moe_top4of8_normtopk_bf16", Qwen3MoeForCausalLM, Qwen3MoeConfig(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        num_experts=8, num_experts_per_tok=4, moe_intermediate_size=40, norm_topk_prob=True,
        use_sliding_window=False, tie_word_embeddings=False), torch.bfloat16, 64),
]
models = {}
for name, cls, cfg, dtype, seqlen in cases:
    cfg._attn_implementation = "eager"
    d, m = random_model(cls, cfg, dtype, name)
    models[name] = (d, m, cls, cfg, seqlen)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, cfg.vocab_size, size=(3, seqlen))
    compare(name, d, m, ids, 2e-5)
    compare(name + ", chunked", d, m, ids, 2e-5, max_tokens=seqlen)


# ---- a quantized checkpoint of a new family, through both forwards ----------------------------
def gptq_dequant(sd, prefix, bits):
    """AutoGPTQ v1 tensors -> float32 weight [n, k]: scale[g] * (q - (z + 1))."""
    qw, qz = sd[prefix + ".qweight"].numpy().view(np.uint32), sd[prefix + ".qzeros"].numpy().view(np.uint32)
    sc, gi = sd[prefix + ".scales"].float().numpy(), sd[prefix + ".g_idx"].numpy()
    per, mask = 32 // bits, (1 << bits) - 1
    q = np.stack([(qw >> (bits * i)) & mask for i in range(per)], 1).reshape(-1, qw.shape[1])
    z = np.stack([(qz >> (bits * i)) & mask for i in range(per)], 2).reshape(qz.shape[0], -1)
    return ((q.astype(np.float32) - (z[gi] + 1)) * sc[gi]).T


def dequantized_state(path, dequant):
    """A quantized checkpoint's tensors as a float state dict: every "<p>.qweight" group through
    dequant(sd, p) into "<p>.weight", the quantizer's side tensors dropped."""
    from safetensors.torch import load_file
    sd = load_file(os.path.join(path, "model.safetensors"))
    state = {}
    for k, v in sd.items():
        if k.endswith(".qweight"):
            p = k[: -len(".qweight")]
            state[p + ".weight"] = torch.tensor(dequant(sd, p))
        elif not k.endswith((".qzeros", ".scales", ".g_idx")):
            state[k] = v.float()
    return sd, state


lq_bin = os.environ.get("LQ_BIN") or os.path.join(build, "llmquant")
d, m, cls, cfg, seqlen = models["qwen3_qk_norm_head_dim_bf16"]
dq = os.path.join(tmp, "qwen3_rtn_w8")
r = subprocess.run([lq_bin, "-q", "rtn", d, "-o", dq, "--bits", "8", "--group-size", "32", "--force"],
                   capture_output=True, text=True)
if r.returncode != 0:
    print(f"FAIL llmquant rtn on Qwen3: {r.stderr.strip()}")
    failures += 1
else:
    sd, state = dequantized_state(dq, lambda sd, p: gptq_dequant(sd, p, 8))
    norms = sorted(k for k in state if k.endswith(("q_norm.weight", "k_norm.weight")))
    if len(norms) != 2 * cfg.num_hidden_layers:
        print(f"FAIL quantized Qwen3: {len(norms)} q/k norm tensors written")
        failures += 1
    mq = cls(cfg).eval()
    mq.load_state_dict(state, strict=True)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, cfg.vocab_size, size=(2, seqlen))
    compare("qwen3 rtn w8 g32 (our file, dequantized into transformers)", dq, mq, ids, 2e-5)

# ---- Gemma 3 through AWQ: scales folded into (1 + w) norms, file dequantized into transformers ---
def awq_dequant(sd, prefix):
    """AutoAWQ GEMM tensors -> float32 weight [n, k]: scale[g] * (q - z), AWQ's nibble order."""
    order = [0, 4, 1, 5, 2, 6, 3, 7]
    def unpack(t):
        t = t.numpy().view(np.uint32)
        return np.stack([(t >> (4 * order[i])) & 15 for i in range(8)], -1).reshape(t.shape[0], -1)
    q, z, sc = unpack(sd[prefix + ".qweight"]), unpack(sd[prefix + ".qzeros"]), sd[prefix + ".scales"].float().numpy()
    g = q.shape[0] // sc.shape[0]
    return ((q.astype(np.float32) - np.repeat(z, g, 0)) * np.repeat(sc, g, 0)).T


d, m, cls, cfg, seqlen = models["gemma3_layer_types_two_bases_f32"]
aq = os.path.join(tmp, "gemma3_awq")
ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
r = subprocess.run([lq_bin, "-q", "awq", d, "-o", aq, "--group-size", "32", "--force",
                    "--tokenizer", os.path.join(ex, "stories260K", "tokenizer.model"),
                    "--calib", os.path.join(ex, "data", "tinystories_sample.txt"),
                    "--nsamples", "8", "--seqlen", "64"], capture_output=True, text=True)
if r.returncode != 0:
    print(f"FAIL llmquant awq on Gemma 3: {r.stderr.strip()}")
    failures += 1
else:
    sd, state = dequantized_state(aq, awq_dequant)
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    nq = sum(k.endswith(".qweight") for k in sd)
    moved = max(float((state[f"model.layers.{i}.input_layernorm.weight"] -
                       m.state_dict()[f"model.layers.{i}.input_layernorm.weight"]).abs().max())
                for i in range(cfg.num_hidden_layers))
    if nq != 7 * cfg.num_hidden_layers or moved < 1e-3:
        print(f"FAIL Gemma 3 awq: {nq} quantized linears, input norms moved by {moved:.3g}")
        failures += 1
    mq = cls(cfg).eval()
    mq.load_state_dict(state, strict=True)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, cfg.vocab_size, size=(2, seqlen))
    compare("gemma3 awq w4 g32 (our file, dequantized into transformers)", aq, mq, ids, 2e-5)
    # and the quantized model stays close to the original (the folding kept the function)
    a, b = theirs(mq, ids), theirs(m, ids)
    rel = float(np.abs(a - b).max() / np.abs(b).max())
    print(f"{'ok  ' if rel < 0.2 else 'FAIL'} gemma3 awq vs fp32 model: max rel logit diff {rel:.3g}")
    failures += rel >= 0.2


# ---- Phi-3: the fused linears quantized as stored, through AWQ and GPTQ with act-order ---------
# weights of a milder spread than the forward checks use: at 0.25 this tiny model is so chaotic
# that even 8-bit weights move its logits by 20%, and 4 bits say nothing about the method
_, _, cls, cfg, seqlen = models["phi3_longrope_short_mha_f32"]
d, m = random_model(cls, cfg, torch.float32, "phi3_quant_f32", std=0.08)
calib = ["--tokenizer", os.path.join(ex, "stories260K", "tokenizer.model"),
         "--calib", os.path.join(ex, "data", "tinystories_sample.txt"), "--nsamples", "8",
         "--seqlen", "64"]
# bound on the max relative logit change: RTN w4 g32 moves them by 0.27, w8 by 0.02
for method, extra, dequant, bound in (
        ("awq", [], awq_dequant, 0.5),
        ("gptq", ["--desc-act"], lambda sd, p: gptq_dequant(sd, p, 4), 0.5),
        ("gptq", ["--desc-act", "--bits", "8"], lambda sd, p: gptq_dequant(sd, p, 8), 0.05)):
    label = f"{method} w{8 if '8' in extra else 4} g32"
    out = os.path.join(tmp, f"phi3_{method}_{len(extra)}")
    r = subprocess.run([lq_bin, "-q", method, d, "-o", out, "--group-size", "32", "--force"] +
                       calib + extra, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL llmquant {method} on Phi-3: {r.stderr.strip()}")
        failures += 1
        continue
    sd, state = dequantized_state(out, dequant)
    fused = sorted({k.rsplit(".", 2)[-2] for k in sd if k.endswith(".qweight")})
    if fused != ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"]:
        print(f"FAIL Phi-3 {method}: quantized modules {fused}")
        failures += 1
    if method == "gptq":  # act-order: one permutation per fused linear, not the identity
        gi = sd["model.layers.0.self_attn.qkv_proj.g_idx"].numpy()
        if (np.diff(gi) >= 0).all():
            print("FAIL Phi-3 gptq --desc-act: g_idx of qkv_proj is sorted (no act-order)")
            failures += 1
    mq = cls(cfg).eval()
    mq.load_state_dict(state, strict=True)
    rng = np.random.default_rng(5)
    ids = rng.integers(0, cfg.vocab_size, size=(2, seqlen))
    compare(f"phi3 {label} (our file, dequantized into transformers)", out, mq, ids, 2e-5)
    a, b = theirs(mq, ids), theirs(m, ids)
    rel = float(np.abs(a - b).max() / np.abs(b).max())
    print(f"{'ok  ' if rel < bound else 'FAIL'} phi3 {label} vs fp32 model: max rel logit diff "
          f"{rel:.3g} (bound {bound})")
    failures += rel >= bound


# ---- the fused linears quantize like their parts ---------------------------------------------
# The same weights as a Phi-3 (qkv_proj, gate_up_proj) and as a Llama (q/k/v, gate/up) are the
# same function; with the per-part differences switched off (AWQ: AutoAWQ clips a fused
# qkv_proj but not q/k_proj; GPTQ: v_proj's attention-weighted Hessian) both must come out with
# the same codes: the fused AWQ folds its previous-op scales into the v rows of qkv_proj and the
# up rows of gate_up_proj exactly where the Llama folds them into v_proj and up_proj.
pcfg = Phi3Config(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5)
pcfg._attn_implementation = "eager"
pd, pm = random_model(Phi3ForCausalLM, pcfg, torch.float32, "phi3_as_llama_f32", std=0.08)
lcfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5,
                   tie_word_embeddings=False)
lm = LlamaForCausalLM(lcfg).eval()
lsd = {}
for k, v in pm.state_dict().items():
    if k.endswith("qkv_proj.weight"):
        for part, w in zip("qkv", v.split(64, 0)):
            lsd[k.replace("qkv_proj", f"{part}_proj")] = w
    elif k.endswith("gate_up_proj.weight"):
        g, u = v.chunk(2, 0)
        lsd[k.replace("gate_up_proj", "gate_proj")], lsd[k.replace("gate_up_proj", "up_proj")] = g, u
    else:
        lsd[k] = v
lm.load_state_dict(lsd, strict=True)
ld = os.path.join(tmp, "phi3_as_llama_llama")
lm.save_pretrained(ld, safe_serialization=True)
rng = np.random.default_rng(6)
ids = rng.integers(0, 512, size=(2, 64))
compare("phi3 weights as a llama, through transformers' Phi-3", ld, pm, ids, 2e-5)
for method, extra, dequant in (("awq", ["--no-awq-clip"], awq_dequant),
                               ("gptq", ["--no-v-attn-weights", "--desc-act"],
                                lambda sd, p: gptq_dequant(sd, p, 4))):
    got = {}
    for fam, src in (("phi3", pd), ("llama", ld)):
        out = os.path.join(tmp, f"eq_{method}_{fam}")
        r = subprocess.run([lq_bin, "-q", method, src, "-o", out, "--group-size", "32", "--force"]
                           + calib + extra, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL llmquant {method} on {fam}: {r.stderr.strip()}")
            failures += 1
            break
        got[fam] = dequantized_state(out, dequant)[1]
    if len(got) < 2:
        continue
    # GPTQ feeds each layer the quantized output of the one before, where a code that rounds
    # the other way (the fused GEMM sums in another order) changes every later Hessian a little:
    # its first layer is compared, at most 1% of codes may differ there
    moved, ndiff, ntot = 0.0, 0, 0
    for i in range(pcfg.num_hidden_layers if method == "awq" else 1):
        pre = f"model.layers.{i}."
        pairs = [("self_attn.qkv_proj", ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]),
                 ("mlp.gate_up_proj", ["mlp.gate_proj", "mlp.up_proj"]),
                 ("self_attn.o_proj", ["self_attn.o_proj"]), ("mlp.down_proj", ["mlp.down_proj"])]
        for fused, parts in pairs:
            a = got["phi3"][pre + fused + ".weight"]
            b = torch.cat([got["llama"][pre + p_ + ".weight"] for p_ in parts], 0)
            diff = (a - b).abs() > 1e-6 * b.abs().max()
            ndiff, ntot = ndiff + int(diff.sum()), ntot + a.numel()
        moved = max(moved, float((got["phi3"][pre + "mlp.gate_up_proj.weight"][64:] -
                                  pm.state_dict()[pre + "mlp.gate_up_proj.weight"][64:]).abs().max()))
    ok = ndiff <= (0 if method == "awq" else 0.01 * ntot) and (method != "awq" or moved > 0.01)
    print(f"{'ok  ' if ok else 'FAIL'} phi3 vs the same weights as a llama, {method} w4 g32: "
          f"{ndiff} of {ntot} weights differ" + (f", up rows moved by the down_proj scales {moved:.3g}"
                                        if method == "awq" else ""))
    failures += not ok

# ---- mixture of experts: `llmquant ppl` (streamed text, gptq windows) against transformers' NLL
# over the same ids (quantizing experts: test_moe_quant.py) ---------------------------------------
d, m, cls, cfg, seqlen = models["mixtral_top2of8_f32"]
lq = os.environ.get("LQ_BIN") or os.path.join(build, "llmquant")
tok = os.path.join(os.environ.get("LQ_SRC", ""), "examples", "stories260K", "llama2c", "tok512.bin")
text = os.path.join(os.environ.get("LQ_SRC", ""), "examples", "data", "tinystories_sample.txt")
if os.path.exists(lq) and os.path.exists(tok):
    r = subprocess.run([lq, "--json", "-q", "ppl", d, "--data", text, "--tokenizer", tok,
                        "--ctx", "64", "--chunks", "3"], capture_output=True, text=True)
    ids = [int(x) for x in subprocess.run([os.path.join(build, "tests", "test_tokenizer"), "--ids",
                                           tok, text], check=True, capture_output=True,
                                          text=True).stdout.split()]
    w = np.array(ids[:3 * 64]).reshape(3, 64)
    want = float(np.mean(nll(theirs(m, w), w)))
    rep = json.loads(r.stdout) if r.returncode == 0 else {}
    got = rep.get("nll", float("nan"))
    # the routers' report: 3 x 64 tokens, 2 experts each, 2 layers of 8 experts
    et = rep.get("expert_tokens", {})
    routed = 3 * 64 * 2 * 2
    ok = (abs(got - want) <= 1e-5 * abs(want) and et.get("experts") == 16 and
          et["min"] * 16 <= routed <= et["max"] * 16)
    print(f"{'ok  ' if ok else 'FAIL'} mixtral ppl (3 windows of 64): NLL {got:.6f}, "
          f"transformers {want:.6f}; tokens per expert {et.get('min')} to {et.get('max')}")
    failures += not ok
else:
    lq_oracle.skip_part("llmquant or the stories tokenizer not found (MoE ppl)")

if failures:
    print(f"{failures} comparison(s) failed")
    sys.exit(1)
print("forward oracle: all comparisons passed")
