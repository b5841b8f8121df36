#!/usr/bin/env python3
"""Our config.json reader agrees with transformers' own config classes on every field the
forward pass needs, over real configs and variants of each supported family. Skips (exit 77)
without transformers."""
import json
import os
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    from transformers import AutoConfig
except ImportError as e:
    lq_oracle.skip(f"{e}")

build, shared, data = (os.environ.get(k) for k in ("LQ_BUILD", "LQ_SHARED", "LQ_TEST_DATA"))
if not build or not data:
    lq_oracle.skip("LQ_BUILD / LQ_TEST_DATA not set")
exe = os.path.join(build, "tests", "test_config")

base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 1000}
variants = {
    "llama_min": base,
    "llama_gqa_bias": {**base, "num_key_value_heads": 2, "attention_bias": True, "mlp_bias": True,
                       "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
                       "bos_token_id": 128000, "eos_token_id": [128001, 128009]},
    "llama31": {**base, "num_key_value_heads": 4, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "llama3_no_orig": {**base, "max_position_embeddings": 4096,
                       "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "rope_type": "llama3"}},
    "llama_linear_legacy_type": {**base, "rope_scaling": {"type": "linear", "factor": 4.0}},
    "llama_head_dim": {**base, "hidden_size": 200, "head_dim": 32},
    "llama_v5_rope_parameters": {**base, "rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                             "rope_theta": 250000.0}},
    "llama_sliding_ignored": {**base, "sliding_window": 64},
    "mistral": {**base, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                "num_key_value_heads": 2, "sliding_window": 128, "rope_theta": 1e6},
    "mistral_default_window": {**base, "architectures": ["MistralForCausalLM"], "model_type": "mistral"},
    "mistral_no_window": {**base, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                          "sliding_window": None, "head_dim": 64},
    "qwen2": {**base, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_key_value_heads": 2,
              "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21,
              "rope_theta": 1e6, "rms_norm_eps": 1e-6, "tie_word_embeddings": True},
    # head_dim from Qwen3Config's default (128, not hidden / heads)
    "qwen3_min": {**base, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                  "num_key_value_heads": 4},
    # Qwen3-0.6B's config.json (sizes as published)
    "qwen3_0.6b": {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
                   "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
                   "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
                   "initializer_range": 0.02, "intermediate_size": 3072,
                   "max_position_embeddings": 40960, "max_window_layers": 28,
                   "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
                   "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
                   "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
                   "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
                   "vocab_size": 151936},
    "qwen3_attention_bias": {**base, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                             "attention_bias": True, "head_dim": 32, "num_key_value_heads": 2},
    # Gemma 2 as google/gemma-2-2b ships it; Gemma 3 as google/gemma-3-270m (transformers 4.5x
    # keys), with linear scaling on the full layers (the 4B+ models), and as transformers 5 writes it
    "gemma2_2b": {"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
                  "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": 30.0,
                  "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
                  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
                  "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2",
                  "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
                  "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
                  "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000},
    "gemma2_defaults": {**base, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                        "num_hidden_layers": 5},
    "gemma3_270m": {"architectures": ["Gemma3ForCausalLM"], "_sliding_window_pattern": 6,
                    "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": 1,
                    "final_logit_softcapping": None, "head_dim": 256,
                    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640,
                    "intermediate_size": 2048, "max_position_embeddings": 32768,
                    "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 18,
                    "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
                    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0, "rope_scaling": None,
                    "rope_theta": 1000000.0, "sliding_window": 512, "vocab_size": 262144},
    "gemma3_linear_global": {**base, "architectures": ["Gemma3ForCausalLM"],
                             "model_type": "gemma3_text", "num_hidden_layers": 8,
                             "num_key_value_heads": 4, "query_pre_attn_scalar": 168,
                             "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                             "sliding_window": 1024, "sliding_window_pattern": 4},
    "gemma3_v5": {**base, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                  "num_hidden_layers": 3, "num_key_value_heads": 1, "head_dim": 32,
                  "sliding_window": 16,
                  "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
                  "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                      "sliding_attention": {"rope_type": "default",
                                                            "rope_theta": 100.0}}},
    # Phi-3-mini-4k-instruct's config.json (sizes as published)
    "phi3_mini_4k": {"architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0,
                     "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000,
                     "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
                     "intermediate_size": 8192, "max_position_embeddings": 4096,
                     "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32,
                     "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
                     "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
                     "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
                     "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32064},
    # Phi-3.5-mini-instruct's shape and LongRoPE (factor lists made up: 48 per head)
    "phi35_mini_longrope": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
                            "bos_token_id": 1, "eos_token_id": 32000, "hidden_size": 3072,
                            "intermediate_size": 8192, "max_position_embeddings": 131072,
                            "num_attention_heads": 32, "num_hidden_layers": 32,
                            "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
                            "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
                            "rope_scaling": {"type": "longrope",
                                             "short_factor": [1.0 + 0.01 * i for i in range(48)],
                                             "long_factor": [1.0 + 1.1 * i for i in range(48)]},
                            "sliding_window": 262144, "vocab_size": 32064},
    # Phi-3-mini-128k's legacy name for it, an explicit attention factor, and an original length
    # in the dict that Phi3Config's own field (4096 by default) overrides
    "phi3_su_attention_factor": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
                                 "hidden_size": 256, "intermediate_size": 512,
                                 "num_attention_heads": 4, "num_hidden_layers": 2,
                                 "vocab_size": 1000, "max_position_embeddings": 131072,
                                 "rope_scaling": {"type": "su", "attention_factor": 1.25,
                                                  "original_max_position_embeddings": 8192,
                                                  "short_factor": [1.5] * 32,
                                                  "long_factor": [4.0 + i for i in range(32)]}},
    # Phi-4 (14B) is a phi3 with GQA and a larger base
    "phi4_shape": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 5120,
                   "intermediate_size": 17920, "num_attention_heads": 40, "num_hidden_layers": 40,
                   "num_key_value_heads": 10, "max_position_embeddings": 16384,
                   "original_max_position_embeddings": 16384, "rope_theta": 250000,
                   "bos_token_id": 100257, "eos_token_id": 100265, "vocab_size": 100352,
                   "sliding_window": None, "rms_norm_eps": 1e-05},
}


def ours(d):
    out = subprocess.run([exe, "--dump", d], check=True, capture_output=True, text=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def theirs(d):
    c = AutoConfig.from_pretrained(d)
    rp = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    gemma = c.model_type in ("gemma2", "gemma3_text")
    local = 0.0
    if "full_attention" in rp or "sliding_attention" in rp:  # per layer type (Gemma 3)
        local = float(rp.get("sliding_attention", {}).get("rope_theta", 0.0))
        rp = rp.get("full_attention", {})
    rtype = rp.get("rope_type", rp.get("type", "default"))
    theta = rp.get("rope_theta", getattr(c, "rope_theta", None))
    eos = c.eos_token_id[0] if isinstance(c.eos_token_id, list) else c.eos_token_id
    sw = getattr(c, "sliding_window", None) if c.model_type in ("mistral", "qwen2", "qwen3", "phi3") else None
    if c.model_type in ("qwen2", "qwen3") and "sliding_attention" not in (getattr(c, "layer_types", None) or []):
        sw = None
    want = {"status": "LQ_OK", "model_type": c.model_type, "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
            "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
            "vocab_size": c.vocab_size, "max_position_embeddings": c.max_position_embeddings,
            "rms_norm_eps": float(c.rms_norm_eps), "rope_theta": float(theta), "rope_type": rtype,
            "tie_word_embeddings": int(bool(c.tie_word_embeddings)),
            "attention_bias": int(bool(getattr(c, "attention_bias", False))) if c.model_type in ("llama", "qwen3") else 0,
            "qkv_bias": int(c.model_type == "qwen2"),
            "qk_norm": int(c.model_type == "qwen3"),
            "mlp_bias": int(bool(getattr(c, "mlp_bias", False))) if c.model_type == "llama" else 0,
            "sliding_window": sw or 0, "bos_token_id": -1 if c.bos_token_id is None else c.bos_token_id,
            "eos_token_id": -1 if eos is None else eos}
    n = c.num_hidden_layers
    if gemma:
        lt = c.layer_types if getattr(c, "sliding_window", None) else ["full_attention"] * n
        layers = "".join("S" if t == "sliding_attention" else "F" for t in lt)
    else:
        layers = ("S" if sw else "F") * n
    act = getattr(c, "hidden_activation", None) if gemma else c.hidden_act
    want.update({
        "act": {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}[act],
        "norm_plus_one": int(gemma), "post_norms": int(gemma),
        "embed_scale": float(c.hidden_size ** 0.5) if gemma else 1.0,
        "attn_scale": float(c.query_pre_attn_scalar ** -0.5) if gemma else 0.0,
        "attn_softcap": float(getattr(c, "attn_logit_softcapping", None) or 0.0) if gemma else 0.0,
        "final_softcap": float(getattr(c, "final_logit_softcapping", None) or 0.0) if gemma else 0.0,
        "rope_local_theta": local, "fused": int(c.model_type == "phi3"), "layers": layers})
    if gemma:
        want["qk_norm"] = int(c.model_type == "gemma3_text")
        want["sliding_window"] = c.sliding_window or 0
    if rtype in ("linear", "llama3"):
        want["factor"] = float(rp["factor"])
    if rtype == "longrope":
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        want["attention_factor"] = float(ROPE_INIT_FUNCTIONS["longrope"](c, "cpu")[1])
        want["original_max_position_embeddings"] = rp["original_max_position_embeddings"]
        for k in ("short_factor", "long_factor"):
            want[k] = ",".join(f"{float(x):.9g}" for x in
                                __import__("numpy").float32(rp[k]).astype(float))
    if rtype == "llama3":
        want["low_freq_factor"] = float(rp["low_freq_factor"])
        want["high_freq_factor"] = float(rp["high_freq_factor"])
        want["original_max_position_embeddings"] = rp["original_max_position_embeddings"]
    return want


fails = 0
with tempfile.TemporaryDirectory() as tmp:
    dirs = {}
    for name, cfg in variants.items():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        dirs[name] = d
    dirs["hf_tiny_sharded (written by transformers)"] = os.path.join(data, "st", "hf_tiny_sharded")
    if shared and os.path.isdir(os.path.join(shared, "models", "stories260K")):
        dirs["stories260K"] = os.path.join(shared, "models", "stories260K")
    for name, d in dirs.items():
        got, want = ours(d), theirs(d)
        for k, v in want.items():
            g = got.get(k)
            same = g is not None and (float(g) == v if isinstance(v, float) else g == str(v))
            if not same:
                print(f"FAIL {name}: {k} ours={g} transformers={v}")
                fails += 1
        extra = set(got) - set(want)
        if extra:
            print(f"FAIL {name}: fields only we report: {sorted(extra)}")
            fails += 1
    print(f"{len(dirs)} configs compared with transformers")
sys.exit(1 if fails else 0)
