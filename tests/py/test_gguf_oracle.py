#!/usr/bin/env python3
"""GGUF input against independent oracles, on the real models scripts/fetch_models.sh caches
(SmolLM2-135M-Instruct Q4_1, Gemma-3-270M Q4_K_M):

  * every tensor of both files decoded by us (test_gguf --dump) == gguf.quants.dequantize,
    bit for bit (Q4_0..Q8_0, Q4_K, Q6_K, F32 as the files hold them);
  * SmolLM2 through `llmquant convert --out-dtype float32` == transformers' own GGUF loader
    (dequantized, q/k un-permuted): every tensor bit for bit;
  * SmolLM2 logits of our forward over the GGUF vs transformers' on two WikiText-2 windows;
  * SmolLM2 token ids of the WikiText-2 test join == llama.cpp's llama-tokenize (the committed
    count + SHA-256 in tests/data/gguf, tokenizer.ggml.pre "smollm" splits digits), and the
    tokenizer.json we rebuild, loaded by HF tokenizers, gives the same ids;
  * Gemma-3-270M (architecture gemma3): token ids of the WikiText-2 test join == llama.cpp's
    llama-tokenize (committed golden; user-defined whitespace pieces), the tokenizer.model we
    rebuild gives the same ids in Google's sentencepiece, `convert --out-dtype float32` == the
    transformers GGUF loader bit for bit (norm weights stored by llama.cpp as 1 + w), and our
    logits over the GGUF vs transformers' on two windows;
  * a float16 GGUF of a random llama through `llmquant ppl` (16-bit weights kept, q/k rows
    restored) against the same checkpoint in Hugging Face layout;
  * random Qwen3, Gemma 2, Gemma 3, Phi-3, Mixtral, Qwen2-MoE and Qwen3-MoE models through
    llama.cpp's own convert_hf_to_gguf.py and back through `llmquant convert`: every tensor as
    stored (Gemma norms (w + 1) - 1 in float32; Phi-3's fused attn_qkv / ffn_up; the experts
    from llama.cpp's stacked ffn_*_exps, one tensor per expert), the Gemma config keys
    (layer_types, soft-caps, query_pre_attn_scalar) and Phi-3's LongRoPE lists (from llama.cpp's
    rope_factors tensors) recovered, and our forward over the GGUF vs transformers on the
    original.

Skips (77) without numpy / gguf / torch / transformers / the cached models."""
import glob
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile

import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import numpy as np
    import gguf
    from safetensors.numpy import load_file
except ImportError as e:
    lq_oracle.skip(f"{e}")

build, src = os.environ.get("LQ_BUILD"), os.environ.get("LQ_SRC")
shared = os.environ.get("LQ_SHARED", "")
models = os.environ.get("LQ_MODELS") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llmquant", "models")
smol = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
gemma = os.path.join(models, "gemma-3-270m-q4_k_m.gguf")
if not build or not src:
    lq_oracle.skip("LQ_BUILD / LQ_SRC not set")
if not os.path.exists(smol) or not os.path.exists(gemma):
    lq_oracle.skip(f"{smol} / {gemma} not cached: run scripts/fetch_models.sh")
lq = os.environ.get("LQ_BIN") or os.path.join(build, "llmquant")
tg = os.path.join(build, "tests", "test_gguf")
tt = os.path.join(build, "tests", "test_tokenizer")
tf = os.path.join(build, "tests", "test_forward")
tmp = os.environ.get("LQ_TMP") or tempfile.mkdtemp()
os.makedirs(tmp, exist_ok=True)
fail = 0


def report(ok, msg):
    global fail
    print(f"{'ok  ' if ok else 'FAIL'} {msg}")
    fail += not ok


def our_logits(model, win, tag):
    """Our forward (test_forward --logits) over model on the windows win [n, len]: logits."""
    ip, op = os.path.join(tmp, tag + "-ids.bin"), os.path.join(tmp, tag + "-logits.bin")
    win.astype(np.int32).tofile(ip)
    subprocess.run([tf, "--logits", model, ip, str(win.shape[0]), op], check=True,
                   capture_output=True)
    lg = np.fromfile(op, dtype=np.float32).reshape(win.shape[0], win.shape[1], -1)
    drop(ip, op)
    return lg


def drop(*paths):
    """CI runs this twice on one disk (Release, then ASan): the GB-sized intermediates (tensor
    dumps, float32 conversions, Gemma's 1 GiB of logits) go as soon as they are compared."""
    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.unlink(p)


# ---- tensors vs gguf-py --------------------------------------------------------------------
for path in (smol, gemma):
    out = os.path.join(tmp, os.path.basename(path) + ".dump")
    subprocess.run([tg, "--dump", path, out], check=True)
    ours = load_file(os.path.join(out, "model.safetensors"))
    r = gguf.GGUFReader(path)
    bad, types = [], {}
    for t in r.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        ref = ref.reshape([int(x) for x in reversed(t.shape)])
        got = ours[t.name]
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        if got.shape != ref.shape or not np.array_equal(got.view(np.uint32), ref.view(np.uint32)):
            bad.append(t.name)
    report(not bad, f"{os.path.basename(path)}: {len(r.tensors)} tensors "
           f"({', '.join(f'{k} x{v}' for k, v in sorted(types.items()))}) bit-identical to "
           f"gguf {importlib.metadata.version('gguf')} dequantize"
           + (f"; differ: {bad[:5]}" if bad else ""))
    del ours
    drop(out)

# ---- SmolLM2 tokens vs llama.cpp (committed golden) and HF tokenizers ----------------------
join = os.path.join(shared, "data", "wikitext2", "wikitext2_test_hf_join.txt")
gold = json.load(open(os.path.join(src, "tests", "data", "gguf",
                                   "smollm2_wikitext2_test_llamacpp_ids.json")))
if os.path.exists(join):
    ids = [int(x) for x in subprocess.run([tt, "--ids", smol, join], check=True,
                                          capture_output=True, text=True).stdout.split()]
    h = hashlib.sha256(np.array(ids, dtype="<u2").tobytes()).hexdigest()
    report(len(ids) == gold["count"] and h == gold["sha256_u16le"] and ids[:32] == gold["first"],
           f"SmolLM2 ids of the WikiText-2 test join: {len(ids)} (llama.cpp {gold['count']}), "
           f"sha256 {'matches' if h == gold['sha256_u16le'] else 'DIFFERS'}")
else:
    lq_oracle.skip_part(f"{join} not found (token ids vs llama.cpp)")
    ids = None

try:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
except ImportError as e:
    lq_oracle.skip_part(f"{e} (transformers comparisons)")
    sys.exit(1 if fail else 0)

hf_dir = os.path.join(tmp, "smol-f32")
subprocess.run([lq, "-q", "convert", smol, "-o", hf_dir, "--out-dtype", "float32", "--force"],
               check=True)
if ids is not None:
    tok = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    theirs = tok.encode(open(join, encoding="utf-8").read()).ids
    report(theirs == ids, f"our rebuilt tokenizer.json in HF tokenizers: {len(theirs)} ids, "
           f"{'same as' if theirs == ids else 'DIFFERENT from'} llama.cpp's")

ref = AutoModelForCausalLM.from_pretrained(os.path.dirname(smol), gguf_file=os.path.basename(smol),
                                           dtype=torch.float32, attn_implementation="eager")
conv = load_file(os.path.join(hf_dir, "model.safetensors"))
sd = ref.state_dict()
bad = [k for k in conv if k not in sd or not np.array_equal(conv[k], sd[k].numpy())]
missing = [k for k in sd if k not in conv and k != "lm_head.weight"]  # tied
report(not bad and not missing, f"convert --out-dtype float32: {len(conv)} tensors bit-identical "
       f"to transformers' GGUF loader" + (f"; differ {bad[:3]} missing {missing[:3]}"
                                          if bad or missing else ""))
del conv, sd
drop(os.path.join(hf_dir, "model.safetensors"))  # its tokenizer files serve the random models

if ids is not None:
    win = np.array(ids[:512], dtype=np.int32).reshape(2, 256)
    a = our_logits(smol, win, "smol")
    with torch.no_grad():
        b = ref(torch.tensor(win, dtype=torch.long)).logits.float().numpy()
    diff, scale = float(np.abs(a - b).max()), float(np.abs(b).max())

    def nll(lg):
        lp = torch.log_softmax(torch.tensor(lg, dtype=torch.float64)[:, :-1], -1)
        t = torch.tensor(win[:, 1:], dtype=torch.long)
        return (-lp.gather(-1, t[..., None])[..., 0]).mean(-1).numpy()

    dn = float(np.abs(nll(a) - nll(b)).max())
    report(diff <= 1e-4 * scale and dn <= 1e-4,
           f"SmolLM2 logits over the GGUF vs transformers: max |diff| {diff:.3g} (max |logit| "
           f"{scale:.3g}), per-window NLL diff {dn:.3g}")

# ---- Gemma-3-270M: tokens, tensors and logits -------------------------------------------
ggold = json.load(open(os.path.join(src, "tests", "data", "gguf",
                                    "gemma3_270m_wikitext2_test_llamacpp_ids.json")))
gids = None
if os.path.exists(join):
    gids = [int(x) for x in subprocess.run([tt, "--ids", gemma, join], check=True,
                                           capture_output=True, text=True).stdout.split()]
    h = hashlib.sha256(np.array(gids, dtype="<u4").tobytes()).hexdigest()
    report(len(gids) == ggold["count"] and h == ggold["sha256_u32le"]
           and gids[:32] == ggold["first"],
           f"Gemma-3 ids of the WikiText-2 test join: {len(gids)} (llama.cpp {ggold['count']}), "
           f"sha256 {'matches' if h == ggold['sha256_u32le'] else 'DIFFERS'}")
g_dir = os.path.join(tmp, "gemma-f32")
res = subprocess.run([lq, "-q", "convert", gemma, "-o", g_dir, "--out-dtype", "float32",
                      "--force"], capture_output=True, text=True)
report(res.returncode == 0, f"gemma-3 convert: exit {res.returncode} {res.stderr.strip()}")
try:
    import sentencepiece
    if gids is not None and res.returncode == 0:
        sp = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(g_dir, "tokenizer.model"))
        theirs = [ggold["first"][0]] + sp.encode(open(join, encoding="utf-8").read())  # + BOS
        report(theirs == gids, f"our rebuilt Gemma tokenizer.model in sentencepiece: "
               f"{len(theirs)} ids, {'same as' if theirs == gids else 'DIFFERENT from'} ours")
except ImportError as e:
    lq_oracle.skip_part(f"{e} (Gemma tokenizer.model in sentencepiece)")
if res.returncode == 0:
    # transformers reads the converted directory as Gemma's tokenizer (no dummy prefix; the
    # user-defined runs of spaces, tabs and newlines in added_tokens_decoder with their model
    # pieces, which llama.cpp's convert_hf_to_gguf.py also needs to type them USER_DEFINED):
    # the same ids as ours on WikiText-2 and on code-like text (indentation, tabs, blank lines)
    from transformers import AutoTokenizer
    htok = AutoTokenizer.from_pretrained(g_dir)
    code = "".join(f"{'    ' * (i % 4)}if (x{i} == '\\n') {{\n\t\treturn {i};\n}}\n\n\n"
                   for i in range(300))
    code_file = os.path.join(tmp, "gemma_code.txt")
    with open(code_file, "w", encoding="utf-8") as f:
        f.write(code)
    for name, path, ours in (("WikiText-2 test join", join, gids), ("code-like text", code_file,
                                                                  None)):
        if not os.path.exists(path):
            continue
        if ours is None:
            ours = [int(x) for x in subprocess.run([tt, "--ids", gemma, path], check=True,
                                                   capture_output=True, text=True).stdout.split()]
        hf = htok(open(path, encoding="utf-8").read())["input_ids"]
        report(hf == ours, f"transformers' {type(htok).__name__} on the converted Gemma-3, "
               f"{name}: {len(hf)} ids, {'same as' if hf == ours else 'DIFFERENT from'} ours "
               f"({len(ours)})")
    gref = AutoModelForCausalLM.from_pretrained(os.path.dirname(gemma),
                                                gguf_file=os.path.basename(gemma),
                                                dtype=torch.float32,
                                                attn_implementation="eager").eval()
    conv = load_file(os.path.join(g_dir, "model.safetensors"))
    sd = gref.state_dict()
    bad = [k for k in conv if k not in sd or not np.array_equal(conv[k], sd[k].numpy())]
    missing = [k for k in sd if k not in conv and k != "lm_head.weight"]  # tied
    report(not bad and not missing and len(conv) == 236,
           f"Gemma-3 convert --out-dtype float32: {len(conv)} tensors bit-identical to "
           f"transformers' GGUF loader" + (f"; differ {bad[:3]} missing {missing[:3]}"
                                            if bad or missing else ""))
    del conv, sd
    drop(g_dir)
    if gids is not None:
        win = np.array(gids[:1024], dtype=np.int32).reshape(2, 512)  # crosses the 512 window
        a = our_logits(gemma, win, "gemma")
        with torch.no_grad():
            b = gref(torch.tensor(win, dtype=torch.long)).logits.float().numpy()
        diff, scale = float(np.abs(a - b).max()), float(np.abs(b).max())
        def window_nll(lg):
            lp = torch.log_softmax(torch.tensor(lg, dtype=torch.float64)[:, :-1], -1)
            t = torch.tensor(win[:, 1:], dtype=torch.long)
            return (-lp.gather(-1, t[..., None])[..., 0]).mean(-1).numpy()

        dn = float(np.abs(window_nll(a) - window_nll(b)).max())
        report(diff <= 1e-4 * scale and dn <= 1e-4,
               f"Gemma-3 logits over the GGUF vs transformers: max |diff| {diff:.3g} (max |logit| "
               f"{scale:.3g}), per-window NLL diff {dn:.3g}")
        del a, b
    del gref

# Qwen3 through llama.cpp's own converter: a random transformers Qwen3 (q/k norms, head_dim
# wider than hidden / heads) -> convert_hf_to_gguf.py (llama.cpp, from the llama-cpp-python
# sdist that scripts/fetch_models.sh caches) -> llmquant convert -> every tensor bit for bit.
llcpp = os.environ.get("LQ_LLAMACPP_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llmquant", "llama.cpp")
conv_py = sorted(glob.glob(os.path.join(llcpp, "llama_cpp_python-*", "vendor", "llama.cpp",
                                        "convert_hf_to_gguf.py")))
if not conv_py:
    lq_oracle.skip_part(f"no convert_hf_to_gguf.py under {llcpp}: run scripts/fetch_models.sh "
                        "llamacpp (Qwen3 GGUF round trip)")
else:
    from transformers import Qwen3Config, Qwen3ForCausalLM
    q3 = os.path.join(tmp, "qwen3-hf")
    cfg = Qwen3Config(vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=256, tie_word_embeddings=False,
                      use_sliding_window=False, rms_norm_eps=1e-6, rope_theta=1e6,
                      bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    qm = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for n_, p_ in qm.named_parameters():
            p_.normal_(0, 0.25) if "norm" not in n_ else p_.copy_(1 + 0.1 * torch.randn_like(p_))
    qm.save_pretrained(q3, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(hf_dir, f), q3)  # SmolLM2's vocabulary: 49152 entries
    q3g, q3c = os.path.join(tmp, "qwen3.gguf"), os.path.join(tmp, "qwen3-conv")
    r = subprocess.run([sys.executable, conv_py[-1], q3, "--outtype", "f32", "--outfile", q3g],
                       capture_output=True, text=True)
    report(r.returncode == 0, "llama.cpp convert_hf_to_gguf.py on a random Qwen3" +
           ("" if r.returncode == 0 else ": " + r.stderr[-300:]))
    if r.returncode == 0:
        subprocess.run([lq, "-q", "convert", q3g, "-o", q3c, "--out-dtype", "float32", "--force"],
                       check=True)
        a_, b_ = load_file(os.path.join(q3, "model.safetensors")), load_file(os.path.join(q3c, "model.safetensors"))
        bad = [k for k in a_ if k not in b_ or not np.array_equal(a_[k].astype(np.float32), b_[k])]
        extra = sorted(set(b_) - set(a_))
        qc = json.load(open(os.path.join(q3c, "config.json")))
        report(not bad and not extra and qc["model_type"] == "qwen3" and qc["head_dim"] == 32,
               f"Qwen3 HF -> llama.cpp GGUF -> llmquant convert: {len(a_)} tensors bit-identical"
               + (f"; differ {bad[:3]} extra {extra[:3]}" if bad or extra else ""))

    # Gemma 2 and Gemma 3 the same way: llama.cpp stores their norm weights as 1 + w (in
    # float32), which we undo as transformers' GGUF loader does, so those tensors compare with
    # (w + 1) - 1 in float32; the rebuilt config runs the same function (logits of our forward
    # over the GGUF vs transformers on the original).
    from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3TextConfig,
                              Gemma3ForCausalLM, Phi3Config, Phi3ForCausalLM, MixtralConfig,
                              MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)
    smol_tok = {f: os.path.join(hf_dir, f)
                for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")}
    demo = os.path.join(src, "examples", "stories260K", "tokenizer.model")
    gcases = [
        ("gemma2", Gemma2ForCausalLM, Gemma2Config(
            vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
            max_position_embeddings=256, sliding_window=16, attn_logit_softcapping=4.0,
            final_logit_softcapping=5.0, bos_token_id=1, eos_token_id=2, pad_token_id=0),
         {"tokenizer.model": demo}),
        ("gemma3_text", Gemma3ForCausalLM, Gemma3TextConfig(
            vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32,
            max_position_embeddings=256, sliding_window=16, bos_token_id=1, eos_token_id=2,
            pad_token_id=0), {f: os.path.join(hf_dir, f) for f in
                              ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")}),
        # Phi-3: attn_qkv and the gate+up ffn_up; LongRoPE's lists as rope_factors tensors (the
        # 48-token windows are past the original 32: the long factors, times the attention
        # factor, must come back from the GGUF)
        ("phi3", Phi3ForCausalLM, Phi3Config(
            vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            original_max_position_embeddings=32, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "short_factor": [1.0 + 0.1 * i for i in range(8)],
                             "long_factor": [1.5 + 0.7 * i for i in range(8)]}),
         {"tokenizer.model": demo}),
        # mixture of experts: llama.cpp stacks each layer's experts into ffn_*_exps [E, n, k]
        # (one view per expert back), Mixtral is a llama with expert_count, Qwen2-MoE's shared
        # expert and its gate (a 1-D tensor there) come back as mlp.shared_expert*
        ("mixtral", MixtralForCausalLM, MixtralConfig(
            vocab_size=512, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            num_local_experts=4, num_experts_per_tok=2, bos_token_id=1, eos_token_id=2,
            tie_word_embeddings=False), {"tokenizer.model": demo}),
        ("qwen2_moe", Qwen2MoeForCausalLM, Qwen2MoeConfig(
            vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32,
            shared_expert_intermediate_size=80, norm_topk_prob=False, use_sliding_window=False,
            bos_token_id=1, eos_token_id=2, tie_word_embeddings=False), smol_tok),
        ("qwen3_moe", Qwen3MoeForCausalLM, Qwen3MoeConfig(
            vocab_size=49152, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
            num_experts=8, num_experts_per_tok=4, moe_intermediate_size=40, norm_topk_prob=True,
            use_sliding_window=False, bos_token_id=1, eos_token_id=2,
            tie_word_embeddings=False), smol_tok),
    ]
    for mt, cls, gcfg, toks in gcases:
        gcfg._attn_implementation = "eager"
        gd, gg, gc = (os.path.join(tmp, mt + x) for x in ("-hf", ".gguf", "-conv"))
        torch.manual_seed(1)
        gm = cls(gcfg).eval()
        with torch.no_grad():
            for n_, p_ in gm.named_parameters():
                p_.normal_(0, 0.25) if "norm" not in n_ else p_.copy_(
                    (0.0 if mt.startswith("gemma") else 1.0) + 0.1 * torch.randn_like(p_))
        gm.save_pretrained(gd, safe_serialization=True)
        for f, path in toks.items():
            shutil.copy(path, os.path.join(gd, f))
        r = subprocess.run([sys.executable, conv_py[-1], gd, "--outtype", "f32", "--outfile", gg],
                           capture_output=True, text=True)
        report(r.returncode == 0, f"llama.cpp convert_hf_to_gguf.py on a random {mt}" +
               ("" if r.returncode == 0 else ": " + r.stderr[-300:]))
        if r.returncode != 0:
            continue
        subprocess.run([lq, "-q", "convert", gg, "-o", gc, "--out-dtype", "float32", "--force"],
                       check=True)
        a_, b_ = load_file(os.path.join(gd, "model.safetensors")), load_file(os.path.join(gc, "model.safetensors"))
        one = np.float32(1)
        bad = [k for k in a_ if k not in b_ or not np.array_equal(
            (a_[k].astype(np.float32) + one) - one if k.endswith("norm.weight") and
            mt.startswith("gemma") else a_[k].astype(np.float32),
            b_[k])]
        extra = sorted(set(b_) - set(a_))
        hc, qc = json.load(open(os.path.join(gd, "config.json"))), json.load(open(os.path.join(gc, "config.json")))
        same = [k for k in ("model_type", "layer_types", "query_pre_attn_scalar", "sliding_window",
                            "attn_logit_softcapping", "final_logit_softcapping", "head_dim")
                if hc.get(k) is not None and hc.get(k) != qc.get(k) and
                not (k in ("layer_types", "sliding_window") and hc.get("use_sliding_window") is False)]
        # (Phi3Config saves no head_dim; Qwen's window keys mean nothing without use_sliding_window)
        report(not bad and not extra and not same,
               f"{mt} HF -> llama.cpp GGUF -> llmquant convert: {len(a_)} tensors as stored"
               f"{' (norms (w + 1) - 1)' if mt.startswith('gemma') else ''}, config keys agree" +
               (f"; differ {bad[:3]} extra {extra[:3]} config {same}" if bad or extra or same else ""))
        win = np.random.default_rng(5).integers(3, gcfg.vocab_size, size=(2, 48)).astype(np.int32)
        a = our_logits(gg, win, mt)
        with torch.no_grad():
            b = gm(torch.tensor(win, dtype=torch.long)).logits.float().numpy()
        diff, scale = float(np.abs(a - b).max()), float(np.abs(b).max())
        report(diff <= 1e-4 * scale, f"{mt} logits of our forward over llama.cpp's GGUF vs "
               f"transformers on the original: max |diff| {diff:.3g} (max |logit| {scale:.3g})")
        drop(gd, gg, gc)

    # A float16 GGUF of a llama (llama.cpp permutes its q/k rows per rotary head) through
    # `llmquant ppl`, which keeps 16-bit dense weights as stored on the CPU: the permuted rows
    # must still be restored, so the perplexity is that of the same weights as a Hugging Face
    # checkpoint (same tokenizer for both)
    from transformers import LlamaConfig, LlamaForCausalLM
    ld, lg = os.path.join(tmp, "llama16-hf"), os.path.join(tmp, "llama16.gguf")
    torch.manual_seed(2)
    lm = LlamaForCausalLM(LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for n_, p_ in lm.named_parameters():
            p_.normal_(0, 0.25) if "norm" not in n_ else p_.copy_(1 + 0.1 * torch.randn_like(p_))
    lm.to(torch.float16).save_pretrained(ld, safe_serialization=True)
    shutil.copy(demo, os.path.join(ld, "tokenizer.model"))
    r = subprocess.run([sys.executable, conv_py[-1], ld, "--outtype", "f16", "--outfile", lg],
                       capture_output=True, text=True)
    report(r.returncode == 0, "llama.cpp convert_hf_to_gguf.py --outtype f16 on a random llama" +
           ("" if r.returncode == 0 else ": " + r.stderr[-300:]))
    if r.returncode == 0:
        story = os.path.join(src, "examples", "data", "tinystories_sample.txt")

        def ppl_of(model):
            out = subprocess.run([lq, "-q", "ppl", model, "--data", story, "--ctx", "128",
                                  "--chunks", "4", "--tokenizer", os.path.join(ld, "tokenizer.model"),
                                  "--device", "cpu"], check=True, capture_output=True, text=True)
            return float(out.stdout.split()[-1])

        p_hf, p_gg = ppl_of(ld), ppl_of(lg)
        report(abs(p_hf - p_gg) <= 1e-5 * p_hf,
               f"ppl of a float16 llama GGUF (q/k rows restored, 16-bit weights kept) {p_gg:.6f} "
               f"vs the same checkpoint in Hugging Face layout {p_hf:.6f}")
    drop(ld, lg)
sys.exit(1 if fail else 0)
